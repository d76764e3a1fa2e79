-- cronwarden 0020: the lease step reads one month of the outbox, not all of them.
-- Forward-only: never edit this file once released; add a new migration instead.
--
-- Since 0019 the outbox is partitioned by fire time, and a read by logical key alone probes the
-- (logical_key, fire_time) index of every partition: a done key's look cost 0.23 ms at 1M
-- records and 0.33 ms at 10M (bench/outbox_scale.py), growing with each index's depth. A
-- logical key names its fire time (`{schedule id}@{YYYY-MM-DDTHH:MM:SSZ}`, and every commit
-- records the fire time parsed from that same text), so the read names it too and Postgres
-- reads that partition first: a done key (a retry, a replay of a done key) is answered from one
-- index. Only when that finds nothing is the key read as before, across every month, so the
-- answer never depends on the key and the record agreeing about the time (the table does not
-- enforce it); a live fire, not done yet, pays one more probe for that.
--
-- acquire_lease is 0012's, with its two outbox reads going through outbox_record_digest; each
-- still runs as its own statement, on a fresh snapshot (the helper is VOLATILE: the second read
-- must see what committed while this call waited for the lease row).

-- The fire time a logical key names, or NULL. Never raises: a key that only looks like one
-- (2026-02-30T...) is NULL, read by key alone.
CREATE FUNCTION cronwarden.logical_key_fire_time(p_key text) RETURNS timestamptz
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    named text := substring(p_key FROM '@([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})Z$');
BEGIN
    IF named IS NULL THEN
        RETURN NULL;
    END IF;
    -- As a timestamp without a zone, then placed in UTC: independent of the session's zone.
    RETURN named::timestamp AT TIME ZONE 'UTC';
EXCEPTION WHEN data_exception THEN
    RETURN NULL;
END
$$;

-- The args digest of the key's outbox record, NULL when it has none.
CREATE FUNCTION cronwarden.outbox_record_digest(p_key text) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    key_time timestamptz := cronwarden.logical_key_fire_time(p_key);
    found_digest text;
BEGIN
    IF key_time IS NOT NULL THEN
        SELECT o.args_digest INTO found_digest FROM cronwarden.outbox o
         WHERE o.logical_key = p_key AND o.fire_time = key_time;
        IF found_digest IS NOT NULL THEN
            RETURN found_digest;
        END IF;
    END IF;
    -- Not there: by key alone, every month (a record written under another time than its key
    -- names is still found: nothing in the table forbids one).
    SELECT o.args_digest INTO found_digest FROM cronwarden.outbox o WHERE o.logical_key = p_key;
    RETURN found_digest;
END
$$;

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
    digest := cronwarden.outbox_record_digest(p_logical_key);
    is_done := digest IS NOT NULL;
    IF NOT is_done THEN
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

        digest := cronwarden.outbox_record_digest(p_logical_key);
        is_done := digest IS NOT NULL;
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
