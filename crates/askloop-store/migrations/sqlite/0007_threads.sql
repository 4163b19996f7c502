-- Threads: conversations that outlive their runs. A thread belongs to a
-- resource (whom the conversation is with) and is keyed by the resource
-- and its id. Its messages are numbered by `seq` from the thread's own
-- `message_count`, bumped in the transaction of the run write that appends
-- them, so a crash can neither lose nor double one. Times are microseconds
-- since the Unix epoch; `metadata` is JSON text (`null` for none).
--
-- A run on a thread names it in `memory_resource_id` and `memory_thread_id`
-- (all three memory columns NULL for a run on no thread); `memory_context`
-- is how many of the run's first messages came from the thread as context.
-- Such a run is written at layout version 3, so an askloop that does not
-- know threads refuses it instead of driving it without its thread. Only
-- added: runs written before read as "on no thread", and a run's older
-- `thread_id` label stays a label.

ALTER TABLE runs ADD COLUMN memory_resource_id TEXT;
ALTER TABLE runs ADD COLUMN memory_thread_id TEXT;
ALTER TABLE runs ADD COLUMN memory_context INTEGER;

CREATE INDEX runs_by_thread ON runs (memory_resource_id, memory_thread_id, created_at DESC, run_id DESC)
    WHERE memory_thread_id IS NOT NULL;

CREATE TABLE threads (
    resource_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    metadata TEXT NOT NULL DEFAULT 'null',
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    message_count INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (resource_id, thread_id)
);

CREATE INDEX threads_by_created ON threads (created_at DESC, thread_id DESC);
CREATE INDEX threads_by_resource ON threads (resource_id, created_at DESC, thread_id DESC);
CREATE INDEX threads_by_agent ON threads (agent_id, created_at DESC, thread_id DESC);
-- A route that names a thread but not its resource (Mastra's) finds it by id.
CREATE INDEX threads_by_id ON threads (thread_id);

CREATE TABLE thread_messages (
    resource_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    run_seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (resource_id, thread_id, seq),
    FOREIGN KEY (resource_id, thread_id) REFERENCES threads (resource_id, thread_id) ON DELETE CASCADE
);
