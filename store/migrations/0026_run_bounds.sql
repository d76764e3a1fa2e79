-- cronwarden 0026: each run's start, duration and broken bound, and the schedule's bounds.
-- A run's commit (store/runs.py) records when its lease was taken (the job starts right after,
-- by the database's clock), how long the job took (the worker's monotonic clock, from the job's
-- start to its return) and the bound it broke, if any: the outbox record keeps it per run (the
-- status page shows it against the bounds), the heartbeat row the last live run's, which the
-- monitor reads to open a `too-fast`, `too-slow` or `late-start` incident, with Postgres alone.
-- Forward-only: never edit this file once released; add a new migration instead.

-- Nullable, no default and no CHECK: added to every partition without a rewrite or a scan
-- (only the commit statement writes them). NULL: a record committed before this migration, or
-- (`breach`) a run within its bounds.
ALTER TABLE cronwarden.outbox
    ADD COLUMN started_at timestamptz,
    ADD COLUMN duration interval,
    ADD COLUMN breach text;

ALTER TABLE cronwarden.heartbeats
    -- The bounds the last live run was judged by (NULL: none set).
    ADD COLUMN duration_min interval,
    ADD COLUMN duration_max interval,
    ADD COLUMN late_start interval,
    ADD COLUMN last_run_key text,
    ADD COLUMN last_run_started_at timestamptz,
    ADD COLUMN last_run_duration interval,
    ADD COLUMN last_run_breach text
        CHECK (last_run_breach IN ('too-fast', 'too-slow', 'late-start'));

-- The monitor's pass asks for the rows whose last run broke a bound: few, found by this index.
CREATE INDEX heartbeats_last_run_breach ON cronwarden.heartbeats (schedule_id)
    WHERE last_run_breach IS NOT NULL AND NOT paused;

ALTER TABLE cronwarden.incidents DROP CONSTRAINT incidents_kind_check;
ALTER TABLE cronwarden.incidents ADD CONSTRAINT incidents_kind_check
    CHECK (kind IN ('overdue', 'never-ran', 'running-too-long', 'system', 'horizon',
                    'too-fast', 'too-slow', 'late-start'));
