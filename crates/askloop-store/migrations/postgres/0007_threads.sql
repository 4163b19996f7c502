-- Threads: conversations that outlive their runs (layout version 3).
--
-- A run on a thread names it in `memory_resource_id` and `memory_thread_id`
-- and says in `memory_context` how many of its first messages came from
-- the thread; all three are NULL for a run on no thread, so rows written
-- before read as "on no thread". A row on a thread is written at layout
-- version 3, so an askloop that does not know threads refuses the run
-- instead of driving it without appending its messages to the thread.
--
-- A thread is keyed by its resource (whom the conversation is with) and
-- its own id. `message_count` is the next message's sequence number: a
-- write appending to the thread bumps it (creating the thread if missing)
-- in one INSERT ... ON CONFLICT DO UPDATE that locks the thread's row, in
-- the same transaction as the run's own write, so concurrent runs on one
-- thread take turns and its sequence stays dense.
-- `metadata` is JSON, 'null' for none. Ids compare bytewise (COLLATE "C")
-- as run ids do, so listings order alike in every store.
--
-- `thread_messages` bodies are stored as the runs' messages are (JSONB).
-- Each names the run that added it and its place in that run
-- (`run_id`, `run_seq`): its stable id. No foreign key to `runs`: pruning
-- a finished run leaves its thread's messages in place. Deleting a thread
-- takes its messages with it (ON DELETE CASCADE).

ALTER TABLE runs ADD COLUMN memory_resource_id TEXT COLLATE "C";
ALTER TABLE runs ADD COLUMN memory_thread_id TEXT COLLATE "C";
ALTER TABLE runs ADD COLUMN memory_context BIGINT;

-- Runs listed by their thread or by any thread of a resource, and found
-- when their thread is deleted. Only runs on a thread are in it.
CREATE INDEX runs_by_thread ON runs (memory_resource_id, memory_thread_id, created_at DESC, run_id DESC)
    WHERE memory_thread_id IS NOT NULL;

CREATE TABLE threads (
    resource_id     TEXT COLLATE "C" NOT NULL,
    thread_id       TEXT COLLATE "C" NOT NULL,
    agent_id        TEXT        NOT NULL,
    title           TEXT        NOT NULL DEFAULT '',
    metadata        JSONB       NOT NULL DEFAULT 'null'::jsonb,
    created_at      TIMESTAMPTZ NOT NULL,
    updated_at      TIMESTAMPTZ NOT NULL,
    message_count   BIGINT      NOT NULL DEFAULT 0,
    PRIMARY KEY (resource_id, thread_id)
);

-- Listing threads newest first: all of them, by resource, by agent.
CREATE INDEX threads_by_created ON threads (created_at DESC, thread_id DESC);
CREATE INDEX threads_by_resource ON threads (resource_id, created_at DESC, thread_id DESC);
CREATE INDEX threads_by_agent ON threads (agent_id, created_at DESC, thread_id DESC);
-- A route that names a thread but not its resource (Mastra's) finds it by id.
CREATE INDEX threads_by_id ON threads (thread_id);

CREATE TABLE thread_messages (
    resource_id TEXT COLLATE "C" NOT NULL,
    thread_id   TEXT COLLATE "C" NOT NULL,
    seq         BIGINT      NOT NULL,
    run_id      TEXT COLLATE "C" NOT NULL,
    run_seq     BIGINT      NOT NULL,
    body        JSONB       NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (resource_id, thread_id, seq),
    FOREIGN KEY (resource_id, thread_id) REFERENCES threads (resource_id, thread_id) ON DELETE CASCADE
);
