-- Answer links: signed links that answer one waiting call as the person
-- they were made out to. The signature proves a link was made here and not
-- changed; only this row says whether it was used or revoked, so answering
-- through a link first sets `used_at` in one compare-and-set (used_at and
-- revoked_at NULL, expires_at still ahead): of two openings of one link,
-- one answers. Times are microseconds since the Unix epoch.
--
-- A link goes with its run: pruning a finished run deletes its links
-- (ON DELETE CASCADE). Only added: nothing else reads this table, and a
-- run answered through a link is raised to layout 5 by the write that
-- records the answer, so a build that does not know links refuses it.

CREATE TABLE answer_links (
    link_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    tool_call_id TEXT NOT NULL,
    recipient TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at INTEGER,
    revoked_at INTEGER
);

-- A run's links, oldest first (and found when the run is pruned).
CREATE INDEX answer_links_by_run ON answer_links (run_id, created_at, link_id);
