-- cronwarden 0003: a fair queue for each lease, replays marked on the lease they hold, and
-- lease-level skips recorded on the heartbeat row.
-- Forward-only: never edit this file once released; add a new migration instead.

-- Whether the lease's holder is a `backfill run` replay: a live fire that finds a replay
-- holding the lease waits for it instead of being skipped.
ALTER TABLE cronwarden.locks ADD COLUMN replay boolean NOT NULL DEFAULT false;

-- Runs waiting for a lease, in the order they get it: live fires (priority 0) before replays
-- (priority 1), first come first served within a priority. A waiter refreshes `expires_at` on
-- every poll, so a waiter that died stops blocking the others within seconds.
CREATE TABLE cronwarden.lock_waiters (
    name        text        NOT NULL,    -- the lock waited for
    waiter      text        NOT NULL,    -- the waiting activity attempt (same form as holder)
    priority    smallint    NOT NULL,
    logical_key text        NOT NULL,
    enqueued_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (name, waiter)
);

-- Fires that ended `overlap-locked` at the lease (a lock shared with another schedule, a stale
-- holder within its TTL): counted, with the last one and who held the lease, so such a fire is
-- never "success with nothing recorded".
ALTER TABLE cronwarden.heartbeats ADD COLUMN lease_skips bigint NOT NULL DEFAULT 0;
ALTER TABLE cronwarden.heartbeats ADD COLUMN last_lease_skip_key text;
ALTER TABLE cronwarden.heartbeats ADD COLUMN last_lease_skip_holder text;
ALTER TABLE cronwarden.heartbeats ADD COLUMN last_lease_skip_at timestamptz;
