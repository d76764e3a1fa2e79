-- cronwarden 0012: two holes in the lease step (0009) closed.
-- Forward-only: never edit this file once released; add a new migration instead.

-- 1. The lease row could vanish between making sure it exists and locking it (a per-key sweep
--    of another fire of the schedule deleting an old released row): the lock then found no row,
--    and the function answered "not taken, held by nobody", so a live allow_all fire was
--    skipped at a free lease. It makes the row again until it has one locked.
-- 2. The stale rule only knew the attempt of a lease still held: once a later attempt of the
--    same activity had released it (or held a queue place), the earlier attempt could take the
--    lease, or its place in line. `taken_by` keeps who last took the lease after a release,
--    and a later attempt's place also marks an earlier attempt stale. An attempt Temporal
--    already retried never takes or queues, as 0009 says.
--    Left: after a later attempt released the lease and ANOTHER run took it, `taken_by` names
--    that run; the earlier attempt is then not known stale at this lease (the outbox and the
--    fencing token still keep it from a second effect, and a last attempt asks Temporal before
--    it commits).
ALTER TABLE cronwarden.locks ADD COLUMN taken_by text;

CREATE OR REPLACE FUNCTION cronwarden.acquire_lease(
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
        -- ON CONFLICT DO NOTHING locks nothing: an old released row found here may be deleted
        -- by another schedule run's per-key sweep before our FOR UPDATE reaches it, which then
        -- finds no row. Then again: the row made on the second pass is new, and no sweep
        -- deletes a row released less than a minute ago.
        LOOP
            INSERT INTO cronwarden.locks (name, holder, attempt, token, expires_at, acquired_at)
            VALUES (p_name, NULL, 0, 0, clock_timestamp(), clock_timestamp())
            ON CONFLICT (name) DO NOTHING;

            SELECT * INTO lease FROM cronwarden.locks WHERE name = p_name FOR UPDATE;
            EXIT WHEN FOUND;
        END LOOP;

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

    IF (lease.taken_by = p_holder AND lease.attempt > p_attempt)
       OR EXISTS (SELECT 1 FROM cronwarden.lock_waiters w
                   WHERE w.name = p_name AND w.waiter = p_holder AND w.attempt > p_attempt) THEN
        -- stale: a late attempt of an activity Temporal has retried already, known by the
        -- lease a later attempt took (held or released since) or by a later attempt's place.
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
               taken_by = p_holder,
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
