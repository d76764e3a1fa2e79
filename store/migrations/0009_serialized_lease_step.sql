-- cronwarden 0009: taking a lease is one serialized transition, in a function.
-- Forward-only: never edit this file once released; add a new migration instead.

-- Before this, acquiring was one statement of many CTEs, each reading its own snapshot; which
-- run saw which commit depended on where each CTE waited. Now every acquire of a lease
-- happens strictly one at a time: the lease row is made to exist, then locked FOR UPDATE, and
-- only then are the outbox and the queue read, each read a fresh snapshot taken after the lock
-- (READ COMMITTED, one snapshot per statement), so it sees every commit of the previous holder.
--
-- The lock wait is bounded (`p_lock_timeout_ms`): a holder stopped between its commit
-- statement and its COMMIT keeps the row locked, and the caller gets lock_not_available back
-- in that time, asks again and keeps heartbeating to Temporal meanwhile. (The holder's own
-- connection is closed by the server after its lock_ttl idle in the transaction:
-- activities/context.py.) Times are clock_timestamp(), not now(): now() is the statement's
-- start, before the wait, and a lease written with it after a long wait would already be
-- expired.
--
-- The rules, in order:
--   done     the key is in the outbox: nothing taken, our queue place (if any) dropped.
--   stale    the lease (or our place) belongs to a later attempt of this same activity: an
--            attempt Temporal already retried never takes or queues.
--   take     the lease is free (released or expired) and nobody waits ahead of us (live fires
--            before replays, arrival order within one), or we are a retry of its holder and
--            nobody of a higher priority waits. A new token fences whoever held it.
--   hand on  we are a retry of its holder but a higher-priority run waits: the dead attempt's
--            lease is released (with a new token, so the attempt is fenced should it be alive)
--            and we queue; the live fire takes it at its next ask.
--   queue    not taken: we keep or take a place when we mean to wait (`p_wait_for_any`:
--            buffer_one fires, replays) or when a replay holds the lease (a live `skip` fire
--            waits for a replay, never for another live run).
CREATE FUNCTION cronwarden.acquire_lease(
    p_name text,
    p_holder text,
    p_ttl_seconds double precision,
    p_logical_key text,
    p_attempt integer,
    p_schedule_id text,
    p_deadline_seconds double precision,
    p_priority integer,
    p_queue_ttl_seconds double precision,
    p_wait_for_any boolean,
    p_sweep_released boolean,
    p_lock_timeout_ms integer
) RETURNS TABLE (
    token bigint,
    done boolean,
    done_digest text,
    queued boolean,
    held_for text,
    held_by_replay boolean,
    took_over boolean
)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    lease cronwarden.locks%ROWTYPE;
    t_now timestamptz;
    digest text;
    is_done boolean;
    my_place timestamptz;
    ahead_key text;
    ahead_priority integer;
    active boolean;
    retaking boolean;
    new_token bigint;
    got_place boolean := false;
BEGIN
    PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);

    -- A key once recorded stays recorded: seen done here, it is done, and nothing is locked.
    -- Seen not done, it is looked at again once the lease row is ours.
    SELECT o.args_digest, true INTO digest, is_done
      FROM cronwarden.outbox o WHERE o.logical_key = p_logical_key;
    IF NOT COALESCE(is_done, false) THEN
        -- The row first, so there is always one to lock: a new lease name starts released.
        INSERT INTO cronwarden.locks (name, holder, attempt, token, expires_at, acquired_at)
        VALUES (p_name, NULL, 0, 0, clock_timestamp(), clock_timestamp())
        ON CONFLICT (name) DO NOTHING;

        SELECT * INTO lease FROM cronwarden.locks WHERE name = p_name FOR UPDATE;

        SELECT o.args_digest, true INTO digest, is_done
          FROM cronwarden.outbox o WHERE o.logical_key = p_logical_key;
    END IF;
    -- The time of this transition: after any wait for the row, so a lease taken now lasts its
    -- whole TTL from now.
    t_now := clock_timestamp();
    IF is_done THEN
        DELETE FROM cronwarden.lock_waiters w WHERE w.name = p_name AND w.waiter = p_holder;
        RETURN QUERY SELECT NULL::bigint, true, digest, false, NULL::text, false, false;
        RETURN;
    END IF;

    IF lease.holder = p_holder AND lease.attempt > p_attempt THEN
        -- stale: a late attempt of an activity Temporal has retried already.
        RETURN QUERY SELECT NULL::bigint, false, NULL::text, false, lease.logical_key,
                            lease.replay, false;
        RETURN;
    END IF;

    SELECT w.enqueued_at INTO my_place
      FROM cronwarden.lock_waiters w WHERE w.name = p_name AND w.waiter = p_holder;
    SELECT w.logical_key, w.priority INTO ahead_key, ahead_priority
      FROM cronwarden.lock_waiters w
     WHERE w.name = p_name AND w.waiter <> p_holder AND w.expires_at > t_now
       AND (w.priority < p_priority
            OR (w.priority = p_priority
                AND (w.enqueued_at, w.waiter) < (COALESCE(my_place, 'infinity'), p_holder)))
     ORDER BY w.priority, w.enqueued_at, w.waiter
     LIMIT 1;

    active := lease.holder IS NOT NULL AND lease.expires_at > t_now;
    retaking := lease.holder = p_holder AND lease.attempt < p_attempt;

    IF (NOT active AND ahead_key IS NULL)
       OR (retaking AND (ahead_key IS NULL OR ahead_priority >= p_priority)) THEN
        UPDATE cronwarden.locks l
           SET holder = p_holder,
               attempt = p_attempt,
               token = nextval('cronwarden.lock_tokens'),
               expires_at = t_now + make_interval(secs => p_ttl_seconds),
               acquired_at = t_now,
               logical_key = p_logical_key,
               schedule_id = p_schedule_id,
               run_deadline = t_now + make_interval(secs => p_deadline_seconds),
               replay = (p_priority = 1)
         WHERE l.name = p_name
        RETURNING l.token INTO new_token;
        -- Our place, and places abandoned long ago.
        DELETE FROM cronwarden.lock_waiters w
         WHERE w.name = p_name
           AND (w.waiter = p_holder OR w.expires_at < t_now - interval '1 minute');
        IF p_sweep_released THEN
            -- Per-key leases (allow_all, `key:{logical key}`) leave a released row per fire
            -- time: the schedule's next per-key acquire deletes its released ones. Never a
            -- held row, never a schedule's or a shared lock's. SKIP LOCKED: two per-key
            -- acquires must not wait for each other over rows either may delete.
            DELETE FROM cronwarden.locks l
             WHERE l.name IN (SELECT s.name FROM cronwarden.locks s
                               WHERE s.schedule_id = p_schedule_id
                                 AND starts_with(s.name, 'key:')
                                 AND s.name <> p_name AND s.holder IS NULL
                                 AND s.expires_at < t_now - interval '1 minute'
                               ORDER BY s.name
                                 FOR UPDATE SKIP LOCKED);
        END IF;
        RETURN QUERY SELECT new_token, false, NULL::text, false, NULL::text, false,
                            lease.holder IS NOT NULL;
        RETURN;
    END IF;

    IF retaking THEN
        -- hand on: a higher-priority run waits, and our dead attempt's lease would make it wait
        -- until the lease expires. Released under a new token, which fences that attempt.
        UPDATE cronwarden.locks l
           SET holder = NULL, token = nextval('cronwarden.lock_tokens'), expires_at = t_now
         WHERE l.name = p_name;
        active := false;
    END IF;

    IF p_wait_for_any OR (active AND lease.replay) THEN
        INSERT INTO cronwarden.lock_waiters AS w
               (name, waiter, attempt, priority, logical_key, enqueued_at, expires_at)
        VALUES (p_name, p_holder, p_attempt, p_priority, p_logical_key, t_now,
                t_now + make_interval(secs => p_queue_ttl_seconds))
        ON CONFLICT (name, waiter) DO UPDATE
           SET expires_at = EXCLUDED.expires_at, attempt = EXCLUDED.attempt
         WHERE w.attempt <= EXCLUDED.attempt
        RETURNING true INTO got_place;
    END IF;

    IF active THEN
        RETURN QUERY SELECT NULL::bigint, false, NULL::text, COALESCE(got_place, false),
                            lease.logical_key, lease.replay, false;
    ELSE
        RETURN QUERY SELECT NULL::bigint, false, NULL::text, COALESCE(got_place, false),
                            COALESCE(ahead_key, lease.logical_key),
                            COALESCE(ahead_priority = 1, false), false;
    END IF;
END
$$;
