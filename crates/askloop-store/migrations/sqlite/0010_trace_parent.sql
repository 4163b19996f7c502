-- A run's trace context: the W3C `traceparent` of its first drive's span,
-- stored when the run starts with trace export on (NULL otherwise, and
-- for every run stored before), so that a later drive of the run (a
-- resume from another process or instance, a recovery, an expiry)
-- continues the same OpenTelemetry trace.
--
-- Only added, and advisory: it raises no layout version. A build that
-- does not know this column reads and drives the run exactly as before;
-- its drives only start traces of their own instead of continuing the
-- run's (the run's trace is cut there, nothing else changes). Written
-- once, when the run is created; no later write touches it.

ALTER TABLE runs ADD COLUMN trace_parent TEXT;
