-- The index of finished runs, its condition spelled as comparisons.
--
-- SQLite evaluates a constant `IN` list of more than two values through a
-- temporary table, and a partial index's condition is evaluated at every
-- write that may move a row into or out of the index: with `status IN
-- ('completed', 'failed', 'cancelled')` each create built one such table and
-- each update of a run two (one for the old row, one for the new). The same
-- condition as comparisons builds none. Measured with callgrind on
-- `askloop-bench --runtime current roundtrip` (2026-12-06): seven of the ten
-- temporary tables a round trip built (the other three were `RETURNING`'s);
-- the ten cost about 9% of its instructions.
--
-- The prune statement spells the condition exactly as here (a query uses a
-- partial index only when its WHERE states the index's own condition). An
-- older askloop sharing the file still prunes correctly: its statement, with
-- `IN`, finds the finished runs through `runs_by_status` instead.

DROP INDEX IF EXISTS runs_finished_by_updated;
CREATE INDEX runs_finished_by_updated ON runs (status, updated_at)
    WHERE (status = 'completed' OR status = 'failed' OR status = 'cancelled');
