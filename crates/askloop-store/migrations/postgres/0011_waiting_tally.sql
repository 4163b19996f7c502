-- How many runs wait, and on how many calls, kept as they change, so that
-- the Inbox's "N waiting" and the questions-waiting figures of /metrics read
-- a handful of rows instead of every waiting run's index entry (an exact
-- count of 100,000 waiting runs took 30-60 ms even as an index-only scan).
--
-- The database keeps it, not askloop: triggers on `runs` follow every
-- insert, delete and change of `status` or `pending`, whichever build or
-- statement makes it (a TRUNCATE empties it), so a build that does not know this table keeps it
-- right too, and no run's layout changes. It is derived, like an index:
-- only read, never written, by askloop's code.
--
-- Each agent's tally is split into 16 slots by run id, so that runs
-- suspending and resuming at once on several instances rarely wait on the
-- same row's lock; a count adds up an agent's slots.

CREATE TABLE waiting_tally (
    agent_id TEXT     NOT NULL,
    slot     SMALLINT NOT NULL,
    runs     BIGINT   NOT NULL,
    calls    BIGINT   NOT NULL,
    PRIMARY KEY (agent_id, slot)
);

-- A run's calls waiting: a row whose pending calls are not a list waits on
-- none (as the count it replaces read them).
CREATE FUNCTION waiting_tally_calls(pending JSONB) RETURNS BIGINT
    LANGUAGE sql IMMUTABLE AS
$$ SELECT CASE WHEN jsonb_typeof(pending) = 'array' THEN jsonb_array_length(pending)::BIGINT ELSE 0 END $$;

CREATE FUNCTION waiting_tally_follow() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path FROM CURRENT AS
$$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.status = 'suspended' THEN
        UPDATE waiting_tally
           SET runs = runs - 1, calls = calls - waiting_tally_calls(OLD.pending)
         WHERE agent_id = OLD.agent_id AND slot = (hashtext(OLD.run_id) & 15);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.status = 'suspended' THEN
        INSERT INTO waiting_tally AS t (agent_id, slot, runs, calls)
        VALUES (NEW.agent_id, hashtext(NEW.run_id) & 15, 1, waiting_tally_calls(NEW.pending))
        ON CONFLICT (agent_id, slot) DO UPDATE SET runs = t.runs + 1, calls = t.calls + EXCLUDED.calls;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_waiting_tally_rows AFTER INSERT OR DELETE ON runs
    FOR EACH ROW EXECUTE FUNCTION waiting_tally_follow();
-- Only the updates that move a run into, out of or within the waiting set:
-- a lease renewal or a running run's step does not call the function.
CREATE TRIGGER runs_waiting_tally_changes AFTER UPDATE OF status, pending, agent_id ON runs
    FOR EACH ROW WHEN (OLD.status = 'suspended' OR NEW.status = 'suspended')
    EXECUTE FUNCTION waiting_tally_follow();

-- A TRUNCATE fires no row triggers: nothing waits after one.
CREATE FUNCTION waiting_tally_clear() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path FROM CURRENT AS
$$
BEGIN
    DELETE FROM waiting_tally;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_waiting_tally_truncate AFTER TRUNCATE ON runs
    FOR EACH STATEMENT EXECUTE FUNCTION waiting_tally_clear();

-- The runs already waiting, counted while no run can change (a migration
-- runs in one transaction; this lock holds writers until it commits).
LOCK TABLE runs IN SHARE ROW EXCLUSIVE MODE;
INSERT INTO waiting_tally (agent_id, slot, runs, calls)
SELECT agent_id, hashtext(run_id) & 15, COUNT(*), SUM(waiting_tally_calls(pending))
  FROM runs WHERE status = 'suspended'
 GROUP BY agent_id, hashtext(run_id) & 15;
