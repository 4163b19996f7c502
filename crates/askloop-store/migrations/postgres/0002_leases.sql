-- Leases on running runs and typed failures (columns only added: rows
-- written before have NULLs here and read as "no lease, no typed failure").
--
-- A running run is held by `lease_owner` until `lease_until`; once that has
-- passed, another process may take it over. `failure` is the typed reason
-- of a failed run.

ALTER TABLE runs ADD COLUMN lease_owner TEXT;
ALTER TABLE runs ADD COLUMN lease_until TIMESTAMPTZ;
ALTER TABLE runs ADD COLUMN failure JSONB;

-- Finding running runs whose lease ran out.
CREATE INDEX runs_by_status_lease ON runs (status, lease_until);
