-- cronwarden 0023: the horizon of a local-time schedule, where the monitor reads it.
-- A zoned schedule's wall times reach Temporal as UTC calendar entries compiled for whole years
-- (schedules/zones.py); past the last of them Temporal fires nothing, the row's next expected
-- fire goes empty and no deadline would ever pass. `schedules apply` writes the end of the
-- compiled years here (NULL: a UTC schedule, or one that ends before it), and the monitor pages
-- a `horizon` incident ahead of it, with Postgres alone, like every other page.
-- Forward-only: never edit this file once released; add a new migration instead.

ALTER TABLE cronwarden.heartbeats ADD COLUMN compiled_until timestamptz;

-- The monitor's pass asks for the horizons near now: a range scan over the zoned rows only.
CREATE INDEX heartbeats_compiled_until ON cronwarden.heartbeats (compiled_until)
    WHERE compiled_until IS NOT NULL AND NOT paused;

ALTER TABLE cronwarden.incidents DROP CONSTRAINT incidents_kind_check;
ALTER TABLE cronwarden.incidents ADD CONSTRAINT incidents_kind_check
    CHECK (kind IN ('overdue', 'never-ran', 'running-too-long', 'system', 'horizon'));
