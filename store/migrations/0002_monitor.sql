-- cronwarden 0002: the absence monitor (incidents, notifications, its own liveness) and what it
-- reads (a derived heartbeat deadline, each lease's run deadline).
-- Forward-only: never edit this file once released; add a new migration instead.

-- The deadline after which a schedule pages, stored and indexed (healthchecks' `alert_after`)
-- so the overdue scan is an index range scan. A trigger keeps it, not a generated column:
-- timestamptz + interval is only STABLE (it depends on the session time zone for day and
-- month units), and Postgres refuses anything but IMMUTABLE expressions there. A trigger also
-- covers every writer of `next_expected_at`/`grace` without their statements changing.
ALTER TABLE cronwarden.heartbeats ADD COLUMN alert_after timestamptz;

-- Evaluated in UTC whatever the writer's session TimeZone: in a zone with DST, a grace of
-- '1 day' added across the change would be 23 or 25 hours. In UTC a day is always 24 hours,
-- as the monitor (which reads grace as a fixed duration) counts it.
CREATE FUNCTION cronwarden.heartbeats_set_alert_after() RETURNS trigger
LANGUAGE plpgsql SET TimeZone = 'UTC' AS $$
BEGIN
    NEW.alert_after := NEW.next_expected_at + NEW.grace;
    RETURN NEW;
END
$$;

CREATE TRIGGER heartbeats_alert_after
    BEFORE INSERT OR UPDATE OF next_expected_at, grace ON cronwarden.heartbeats
    FOR EACH ROW EXECUTE FUNCTION cronwarden.heartbeats_set_alert_after();

-- Through the trigger (it fires on `grace` being set), so existing rows are computed in UTC too.
UPDATE cronwarden.heartbeats SET grace = grace;

-- The monitor's hot query: `NOT paused AND alert_after < now()`.
CREATE INDEX heartbeats_alert_after ON cronwarden.heartbeats (alert_after) WHERE NOT paused;

-- Which schedule's run holds a lease and when that run should have finished (acquired_at +
-- timeout + grace): a lease still renewed past it is a run that is taking too long.
ALTER TABLE cronwarden.locks ADD COLUMN schedule_id text;
ALTER TABLE cronwarden.locks ADD COLUMN run_deadline timestamptz;

CREATE TABLE cronwarden.incidents (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule_id text,                    -- NULL for a system incident (many schedules at once)
    kind        text        NOT NULL
                CHECK (kind IN ('overdue', 'never-ran', 'running-too-long', 'system')),
    summary     text        NOT NULL,
    details     jsonb       NOT NULL DEFAULT '{}',
    parent_id   bigint REFERENCES cronwarden.incidents (id),  -- the system incident paging for it
    opened_at   timestamptz NOT NULL DEFAULT now(),
    resolved_at timestamptz,
    resolution  text                     -- recovered | paused | schedule-deleted | members-resolved
);

-- At most one open incident per schedule, and at most one open system incident ('' stands for
-- it: a schedule id is never empty). Opening is an INSERT that this index lets only one
-- monitor replica win.
CREATE UNIQUE INDEX incidents_one_open
    ON cronwarden.incidents ((coalesce(schedule_id, ''))) WHERE resolved_at IS NULL;
CREATE INDEX incidents_parent ON cronwarden.incidents (parent_id) WHERE parent_id IS NOT NULL;

-- Notifications are persisted (with the incident change that causes them) before any delivery,
-- one row per sink, and delivered at least once; a row is never sent again once delivered.
CREATE TABLE cronwarden.notifications (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    incident_id     bigint      NOT NULL REFERENCES cronwarden.incidents (id),
    event           text        NOT NULL CHECK (event IN ('trigger', 'resolve')),
    sink            text        NOT NULL,
    message         jsonb       NOT NULL,  -- sink-neutral; rendered per sink at delivery
    dedup_key       text        NOT NULL,  -- what the sink folds by (PagerDuty's dedup_key)
    created_at      timestamptz NOT NULL DEFAULT now(),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    claimed_by      text,
    claimed_until   timestamptz,             -- a sender holds the row until then
    delivered_at    timestamptz,
    last_error      text,
    UNIQUE (incident_id, event, sink)
);

CREATE INDEX notifications_pending
    ON cronwarden.notifications (next_attempt_at) WHERE delivered_at IS NULL;
-- Delivery is in order per (sink, dedup key): a row waits for every earlier undelivered row of
-- the same sink and key, across incidents (all incidents of one schedule share the key).
CREATE INDEX notifications_pending_by_key
    ON cronwarden.notifications (sink, dedup_key, id) WHERE delivered_at IS NULL;

-- Watch the watcher: each monitor process records every pass it completes.
CREATE TABLE cronwarden.monitor_state (
    monitor_id   text PRIMARY KEY,
    host         text        NOT NULL,
    pid          integer     NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    last_pass_at timestamptz NOT NULL DEFAULT now(),
    passes       bigint      NOT NULL DEFAULT 0
);
