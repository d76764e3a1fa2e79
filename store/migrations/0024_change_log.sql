-- cronwarden 0024: who changed what. Every `schedules apply`, `pause`, `unpause`, `trigger`,
-- `delete` and `backfill run` appends a row: who (--actor, else CRONWARDEN_ACTOR, else the OS
-- user and host), what, to which schedule and why (--reason). Append-only: the runtime role may
-- INSERT and SELECT, never UPDATE, DELETE or TRUNCATE (store/migrate.py's RUNTIME_EXCEPTIONS and
-- deploy/sql/roles.sql), so a record once written stays as written.
-- Forward-only: never edit this file once released; add a new migration instead.

CREATE TABLE cronwarden.change_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The database's clock, not the caller's: rows from many machines order by one clock.
    at          timestamptz NOT NULL DEFAULT statement_timestamp(),
    actor       text        NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    action      text        NOT NULL
        CHECK (action IN ('apply', 'pause', 'unpause', 'trigger', 'delete', 'backfill')),
    -- NULL: an event of a whole schedule file rather than of one schedule.
    schedule_id text,
    reason      text        CHECK (length(reason) <= 2000),
    details     jsonb       NOT NULL DEFAULT '{}'::jsonb
);

-- `audit log ID` and the status page read one schedule's latest rows; `audit log` all of them.
CREATE INDEX change_log_schedule_at ON cronwarden.change_log (schedule_id, at DESC, id DESC);
CREATE INDEX change_log_at ON cronwarden.change_log (at, id);
