-- cronwarden 0027: timed pauses (`schedules pause ID --for 2h` or `--until T`).
-- The heartbeat row keeps when an operator's pause ends; the monitor unpauses the schedule once
-- that time has passed (as `schedules unpause` does, Temporal and this row), and when it cannot
-- (Temporal unreachable, an error) it records why here and opens an `unpause-failed` incident,
-- with Postgres alone, and tries again on every pass until it can.
-- Forward-only: never edit this file once released; add a new migration instead.

ALTER TABLE cronwarden.heartbeats
    -- NULL: paused until `schedules unpause` (or not paused at all).
    ADD COLUMN paused_until timestamptz,
    -- Why the monitor could not end the timed pause on its last try, and since when it has not.
    ADD COLUMN unpause_error text,
    ADD COLUMN unpause_failed_at timestamptz;

-- Whatever lifts a pause (`schedules unpause`, the monitor finding it lifted in Temporal's UI,
-- `apply` forgetting the pause of a deleted schedule) ends its timed part too: a later pause
-- without an end must not inherit an old end, nor an old failure. A trigger, not each
-- statement: every path that clears `paused` is covered, today's and tomorrow's.
CREATE FUNCTION cronwarden.heartbeats_clear_timed_pause() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.paused_until := NULL;
    NEW.unpause_error := NULL;
    NEW.unpause_failed_at := NULL;
    RETURN NEW;
END
$$;

CREATE TRIGGER heartbeats_clear_timed_pause
    BEFORE UPDATE OF paused ON cronwarden.heartbeats
    FOR EACH ROW WHEN (NOT NEW.paused)
    EXECUTE FUNCTION cronwarden.heartbeats_clear_timed_pause();

-- The monitor's pass asks for the timed pauses that have ended: few, found by this index.
CREATE INDEX heartbeats_paused_until ON cronwarden.heartbeats (paused_until)
    WHERE paused AND paused_until IS NOT NULL;

ALTER TABLE cronwarden.incidents DROP CONSTRAINT incidents_kind_check;
ALTER TABLE cronwarden.incidents ADD CONSTRAINT incidents_kind_check
    CHECK (kind IN ('overdue', 'never-ran', 'running-too-long', 'system', 'horizon',
                    'too-fast', 'too-slow', 'late-start', 'unpause-failed'));
