-- A long run's later resolutions, one row each (layout version 7).
--
-- A run's `resolutions` column holds its first 16 resolutions. Each later
-- one is a row here instead, so that a step of a long run appends a small
-- row rather than rewriting the run's row with every earlier decision in
-- it (SQLite rewrites a whole row, however little of it changes). A row
-- is keyed by the run's version after the write that made it and its place
-- in that write: a run's resolutions are its column's, then these in key
-- order.
--
-- The write that stores a run's first row here raises the run to layout 7,
-- so a build that reads only the column refuses the run instead of missing
-- its later decisions; from then on every new resolution of the run comes
-- here, never to the column. Only added: a run with no row here reads as
-- before. A row goes with its run (ON DELETE CASCADE).

CREATE TABLE run_resolutions (
    run_id   TEXT    NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    version  INTEGER NOT NULL,
    n        INTEGER NOT NULL,
    body     TEXT    NOT NULL,
    PRIMARY KEY (run_id, version, n)
) WITHOUT ROWID;
