-- Runs and their append-only messages (layout version 1).
--
-- Timestamps are microseconds since the Unix epoch (exact, and they sort as
-- integers). JSON is stored as text and parsed by askloop, which names the
-- run when a value cannot be read.

CREATE TABLE runs (
    run_id          TEXT    NOT NULL PRIMARY KEY,
    agent_id        TEXT    NOT NULL,
    thread_id       TEXT,
    status          TEXT    NOT NULL,
    version         INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    pending         TEXT    NOT NULL,
    step_results    TEXT    NOT NULL,
    message_count   INTEGER NOT NULL,
    steps           INTEGER NOT NULL,
    usage           TEXT    NOT NULL,
    error           TEXT,
    metadata        TEXT    NOT NULL,
    schema_version  INTEGER NOT NULL
);

-- Listing newest first, all runs or by status or by agent.
CREATE INDEX runs_by_created ON runs (created_at DESC, run_id DESC);
CREATE INDEX runs_by_status ON runs (status, created_at DESC, run_id DESC);
CREATE INDEX runs_by_agent ON runs (agent_id, created_at DESC, run_id DESC);
-- Pruning finished runs by age.
CREATE INDEX runs_by_status_updated ON runs (status, updated_at);

CREATE TABLE messages (
    run_id  TEXT    NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,
    body    TEXT    NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
