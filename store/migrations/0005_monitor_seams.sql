-- cronwarden 0005: notifications that can never be delivered are set aside (dead-lettered)
-- instead of holding back every later page of their sink and key; each monitor records which
-- sinks it delivers to; paused heartbeat rows are found by an index.
-- Forward-only: never edit this file once released; add a new migration instead.

-- A notification given up on: a sink that refused the payload (4xx) or failed every attempt.
-- It no longer blocks the rows after it (delivery order is per sink and key), and `status`
-- lists it. Exactly one of delivered_at and dead_at is set once a row is settled.
ALTER TABLE cronwarden.notifications ADD COLUMN dead_at timestamptz;

-- The pending indexes now mean "neither delivered nor dead".
DROP INDEX cronwarden.notifications_pending;
DROP INDEX cronwarden.notifications_pending_by_key;
CREATE INDEX notifications_pending
    ON cronwarden.notifications (next_attempt_at) WHERE delivered_at IS NULL AND dead_at IS NULL;
CREATE INDEX notifications_pending_by_key
    ON cronwarden.notifications (sink, dedup_key, id)
    WHERE delivered_at IS NULL AND dead_at IS NULL;
CREATE INDEX notifications_dead ON cronwarden.notifications (dead_at) WHERE dead_at IS NOT NULL;

-- The sinks a monitor process delivers to. A replica pages for the sinks of every monitor
-- that passed recently, and claims only the rows of its own sinks: replicas whose sink
-- settings differ each deliver what they can, and none fails (or gives up on) a row that
-- another replica could deliver.
ALTER TABLE cronwarden.monitor_state ADD COLUMN sinks text[] NOT NULL DEFAULT '{}';

-- Every monitor pass looks at the rows marked paused (to check the pause with Temporal); they
-- are few, and this keeps that look an index scan.
CREATE INDEX heartbeats_paused ON cronwarden.heartbeats (schedule_id) WHERE paused;
