-- Notifications waiting to be delivered (webhooks): each row is written in
-- the same transaction as the run write that raised it, so a crash can
-- neither lose one nor invent one. A sender claims due rows under a lease
-- (`lease_owner`, `lease_until`), like a run's, so two senders never send
-- the same row at once; a sender that dies lets its lease run out.
--
-- `state` is `pending`, `delivered` or `dead` (given up on after the last
-- allowed attempt); times are microseconds since the Unix epoch. Rows are
-- kept apart from `runs` (no foreign key): pruning a run does not take its
-- undelivered notifications with it.

CREATE TABLE outbox (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    destination TEXT NOT NULL,
    event TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    next_at INTEGER NOT NULL,
    last_error TEXT,
    lease_owner TEXT,
    lease_until INTEGER,
    -- A token unique to the claim that last took the row, by which that
    -- claim reads back what it took.
    claim_token TEXT
);

CREATE INDEX outbox_due ON outbox (state, next_at);
CREATE INDEX outbox_by_run ON outbox (run_id, created_at);
CREATE INDEX outbox_by_claim ON outbox (claim_token);
