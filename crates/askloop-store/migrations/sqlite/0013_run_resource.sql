-- The resource a run belongs to when it is on no thread: the person a
-- trusted proxy named, or a named token's own resource, for a run started
-- by a caller walled to resources. A run on a thread belongs to its
-- thread's resource (memory_resource_id); this names it for every other
-- run, so that one person's runs are walled from another's whether or not
-- they name a thread. A listing walled to some resources keeps the runs
-- whose COALESCE(memory_resource_id, resource_id) is one of them.
--
-- NULL for every run stored before, and for runs started by a caller
-- walled to no resource (the CLI, a program on the library,
-- ASKLOOP_API_TOKEN, a server without tokens): such a run belongs to no
-- resource, and only callers walled to none see it.
--
-- A run on no thread that has a resource is written at layout 8, which an
-- older askloop refuses to read (and leaves out of its listings) instead
-- of showing it to every caller of its agent. Written once, when the run
-- is created; no later write touches it.

ALTER TABLE runs ADD COLUMN resource_id TEXT;
