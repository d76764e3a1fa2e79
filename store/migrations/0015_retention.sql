-- cronwarden 0015: the monitor deletes old incidents and notifications (store/retention.py).
-- Forward-only: never edit this file once released; add a new migration instead.

-- Each pass deletes at most a few small batches of rows settled longer ago than the retention,
-- oldest first. These indexes find them by age, so a pass with nothing to delete reads a few
-- index pages instead of both tables whole. A notification is settled when it was delivered
-- or given up on: its age is the first of those times (pending rows index as NULL).
CREATE INDEX notifications_settled
    ON cronwarden.notifications ((coalesce(delivered_at, dead_at)));
CREATE INDEX incidents_resolved
    ON cronwarden.incidents (resolved_at) WHERE resolved_at IS NOT NULL;
