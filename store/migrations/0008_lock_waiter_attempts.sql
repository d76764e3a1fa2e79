-- cronwarden 0008: which activity attempt holds a place in a lease's queue.
-- Forward-only: never edit this file once released; add a new migration instead.

-- A place is keyed by the waiting activity (workflow id / run id / activity id), shared by its
-- attempts. Temporal retries an activity once it declared the previous attempt dead, but that
-- attempt may still be polling (a partitioned worker): knowing the attempt lets the queue refuse
-- it, so it never keeps a ghost place ahead of live fires after its retry got the lease.
-- Existing places (a few seconds' worth) count as first attempts.
ALTER TABLE cronwarden.lock_waiters ADD COLUMN attempt integer NOT NULL DEFAULT 1;
