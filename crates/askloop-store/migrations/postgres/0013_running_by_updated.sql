-- Running runs by their last write: what the stalled-run sweep reads to
-- find runs whose lease ran out, in the order it reads them.
--
-- The sweep read `runs_by_status` for status 'running' with a bitmap scan,
-- which visits the table for every entry it finds, and every run that ever
-- ran leaves an entry there until VACUUM removes it. With 100,000 runs
-- waiting and no vacuum since they were made, one sweep visited 11,587
-- table pages to find no run (39 ms). This index holds running runs only;
-- the sweep walks it in order and stops at its page's end, and an entry a
-- run left when it stopped running is marked dead the first time a scan
-- meets it, then skipped without visiting the table.
--
-- Only added. Its columns are all indexed already, so no write that was
-- heap-only (a lease renewal) stops being one, and a write that leaves its
-- run in any other status adds no entry to it.

CREATE INDEX runs_running_by_updated ON runs (updated_at, run_id) WHERE status = 'running';
