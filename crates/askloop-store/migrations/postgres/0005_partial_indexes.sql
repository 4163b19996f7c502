-- Indexes that a run's ordinary writes leave alone (no column changes:
-- rows of every layout version read as before).
--
-- A round trip of one question writes its run four times (created,
-- suspended, answered, completed), and each index keyed on `status` had its
-- entry for the run moved at every one of those writes, `updated_at`'s at
-- every write of any kind. Each index below holds only the runs its sweep
-- looks for, so a write touches it only when the run enters or leaves that
-- set: the prune index when a run finishes, the expiry index only for
-- questions with a time limit. A lease renewal now changes no indexed
-- column, so PostgreSQL can make it a heap-only (HOT) update.

DROP INDEX IF EXISTS runs_by_status_updated;
DROP INDEX IF EXISTS runs_by_status_lease;
DROP INDEX IF EXISTS runs_by_status_expiry;

-- Pruning finished runs by age. The prune statement spells the statuses
-- exactly as here: PostgreSQL proves a partial index usable from the
-- literals of a query, not from its parameters.
CREATE INDEX runs_finished_by_updated ON runs (status, updated_at)
    WHERE status IN ('completed', 'failed', 'cancelled');
-- Suspended runs whose earliest time limit passed, soonest first.
CREATE INDEX runs_suspended_by_expiry ON runs (status, expires_at, run_id)
    WHERE status = 'suspended' AND expires_at IS NOT NULL;
