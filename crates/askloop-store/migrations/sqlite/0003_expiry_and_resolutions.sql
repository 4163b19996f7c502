-- Time limits on questions and the record of who resolved what (columns
-- only added: rows written before read as "no limit, nothing recorded").
--
-- `expires_at` is the earliest time limit (microseconds since the Unix
-- epoch) of the run's pending calls, NULL when none has one: the expiry
-- sweep finds suspended runs whose limit passed from an index on it.
-- `resolutions` is the JSON array of the run's answers, declines,
-- approvals, expiries, cancels and recoveries, with who made them.

ALTER TABLE runs ADD COLUMN resolutions TEXT NOT NULL DEFAULT '[]';
ALTER TABLE runs ADD COLUMN expires_at INTEGER;

CREATE INDEX runs_by_status_expiry ON runs (status, expires_at);
