-- Answer links: signed links that answer one waiting call as the person
-- they were made out to. The signature proves a link was made here and not
-- changed; only this row says whether it was used or revoked, so answering
-- through a link first sets `used_at` in one compare-and-set (used_at and
-- revoked_at NULL, expires_at still ahead): of two openings of one link,
-- one answers, on any instance sharing the database.
--
-- A link goes with its run: pruning a finished run deletes its links
-- (ON DELETE CASCADE). Ids compare bytewise (COLLATE "C") as run ids do.
-- Only added: nothing else reads this table, and a run answered through a
-- link is raised to layout 5 by the write that records the answer, so a
-- build that does not know links refuses it.

CREATE TABLE answer_links (
    link_id      TEXT COLLATE "C" PRIMARY KEY,
    run_id       TEXT COLLATE "C" NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    tool_call_id TEXT        NOT NULL,
    recipient    TEXT        NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ NOT NULL,
    used_at      TIMESTAMPTZ,
    revoked_at   TIMESTAMPTZ
);

-- A run's links, oldest first (and found when the run is pruned).
CREATE INDEX answer_links_by_run ON answer_links (run_id, created_at, link_id);
