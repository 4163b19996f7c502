-- Runs and their append-only messages (layout version 1).
--
-- Ids compare bytewise (COLLATE "C"), so "newest first, then by id" orders
-- runs the same way in every store whatever the database's locale.

CREATE TABLE runs (
    run_id          TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    agent_id        TEXT        NOT NULL,
    thread_id       TEXT,
    status          TEXT        NOT NULL,
    version         BIGINT      NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL,
    updated_at      TIMESTAMPTZ NOT NULL,
    pending         JSONB       NOT NULL,
    step_results    JSONB       NOT NULL,
    message_count   BIGINT      NOT NULL,
    steps           BIGINT      NOT NULL,
    usage           JSONB       NOT NULL,
    error           TEXT,
    metadata        JSONB       NOT NULL,
    schema_version  INTEGER     NOT NULL
);

-- Listing newest first, all runs or by status or by agent.
CREATE INDEX runs_by_created ON runs (created_at DESC, run_id DESC);
CREATE INDEX runs_by_status ON runs (status, created_at DESC, run_id DESC);
CREATE INDEX runs_by_agent ON runs (agent_id, created_at DESC, run_id DESC);
-- Pruning finished runs by age.
CREATE INDEX runs_by_status_updated ON runs (status, updated_at);

CREATE TABLE messages (
    run_id  TEXT COLLATE "C" NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    seq     BIGINT NOT NULL,
    body    JSONB  NOT NULL,
    PRIMARY KEY (run_id, seq)
);
