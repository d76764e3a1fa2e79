-- cronwarden 0019: the outbox, range-partitioned by fire time, one partition per UTC month.
-- Forward-only: never edit this file once released; add a new migration instead.
--
-- Why: the outbox kept every record for ever, and each guard check, plan and audit read one
-- table that only grew. Records are now kept for the dedupe horizon (CRONWARDEN_OUTBOX_RETENTION,
-- docs/guarantees.md) and whole months past it are dropped, never deleted row by row.
--
-- The shape:
--   cronwarden.outbox                       the partitioned table every statement names;
--   cronwarden_outbox.outbox_YYYY_MM        one partition per month, created months ahead by
--                                           `create_outbox_partitions` (migrate, the monitor);
--   cronwarden_outbox.outbox_before_YYYY_MM an existing installation's records, attached whole
--                                           as one partition up to that month (no copy);
--   cronwarden_outbox.outbox_default        whatever no month holds (a fire before the first
--                                           partition, or at a time such as year 1 or 9999), so
--                                           a commit never finds its partition missing.
-- Partitions live in a schema of their own: the runtime role has no USAGE there, so it reaches
-- records only through cronwarden.outbox, which it may only read and insert into (migrate.py),
-- and the schema's dated tables stay out of store/schema.sql.
--
-- One record per logical key: a unique index of a partitioned table must hold the partition
-- key, so it is (logical_key, fire_time). A logical key names its fire time (`{schedule id}@{fire
-- time, whole seconds}`, and the guard passes the fire time parsed from that same text), so the
-- pair is as unique as the key alone was. Lookups by key alone (acquire_lease, outbox.committed)
-- probe that index once per partition: their cost follows the number of partitions, which the
-- horizon bounds, not the number of records.
--
-- Online: `cronwarden migrate` first builds the (logical_key, fire_time) index CONCURRENTLY and
-- validates a CHECK (fire_time < bound) on the old table under SHARE UPDATE EXCLUSIVE, neither of
-- which stops a commit (store/outbox_partitions.py, `prepare_conversion`). What is left here is
-- catalog work under one brief ACCESS EXCLUSIVE lock: attaching a table whose validated CHECK
-- implies the partition bound scans nothing, and a matching index is attached, not built. Applied
-- without that preparation (this file alone), the same steps build and scan under the lock.

CREATE SCHEMA cronwarden_outbox;

-- The end (exclusive) of the range a partition of ours covers, read from its name.
CREATE FUNCTION cronwarden.outbox_partition_end(p_name text) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE
        WHEN p_name ~ '^outbox_before_[0-9]{4,}_[0-9]{2}$'
            THEN to_timestamp(substr(p_name, 15) || '_01', 'YYYY_MM_DD')::timestamp
                 AT TIME ZONE 'UTC'
        WHEN p_name ~ '^outbox_[0-9]{4,}_[0-9]{2}$'
            THEN (to_timestamp(substr(p_name, 8) || '_01', 'YYYY_MM_DD')::timestamp
                  + interval '1 month') AT TIME ZONE 'UTC'
    END
$$;

-- Creates the monthly partitions from the current month through the month holding p_until,
-- skipping months that exist or that the old table's partition covers; returns the names
-- created. SECURITY DEFINER: the monitor runs as the runtime role, which may not CREATE; this
-- function is the one thing it may do. A month is created beside the table and then attached
-- (SHARE UPDATE EXCLUSIVE on cronwarden.outbox, so commits go on), with a lock timeout: a month
-- that cannot get its locks now is left to the next call, months before it is needed.
CREATE FUNCTION cronwarden.create_outbox_partitions(p_until timestamptz) RETURNS SETOF text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '2s'
    AS $$
DECLARE
    -- Months are counted in UTC, as timestamps without a zone: a month added to a timestamptz
    -- follows the session's time zone.
    m timestamp := date_trunc('month', now() AT TIME ZONE 'UTC');
    covered timestamptz;
    name text;
BEGIN
    IF p_until > now() + interval '2 years' THEN
        RAISE EXCEPTION 'partitions are created at most two years ahead, not through %', p_until;
    END IF;
    SELECT max(cronwarden.outbox_partition_end(c.relname)) INTO covered
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'cronwarden.outbox'::regclass
       AND c.relnamespace = 'cronwarden_outbox'::regnamespace
       AND c.relname LIKE 'outbox\_before\_%';
    WHILE m AT TIME ZONE 'UTC' <= p_until LOOP
        name := 'outbox_' || to_char(m, 'YYYY_MM');
        IF (covered IS NULL OR m AT TIME ZONE 'UTC' >= covered)
           AND to_regclass('cronwarden_outbox.' || quote_ident(name)) IS NULL THEN
            BEGIN
                EXECUTE format('CREATE TABLE cronwarden_outbox.%I'
                               ' (LIKE cronwarden.outbox INCLUDING DEFAULTS)', name);
                -- Scans the default partition (under its lock) for rows of this month: there
                -- are none unless a fire committed more than the months ahead early.
                EXECUTE format('ALTER TABLE cronwarden.outbox ATTACH PARTITION'
                               ' cronwarden_outbox.%I FOR VALUES FROM (%L) TO (%L)',
                               name, m AT TIME ZONE 'UTC',
                               (m + interval '1 month') AT TIME ZONE 'UTC');
                RETURN NEXT name;
            EXCEPTION WHEN lock_not_available OR check_violation THEN
                -- Nothing is lost: that month's commits land in the default partition until a
                -- later call attaches the month (never, if the default holds its rows).
                RAISE WARNING 'outbox partition % not created now: %', name, SQLERRM;
            END;
        END IF;
        m := m + interval '1 month';
    END LOOP;
END
$$;

-- Detaches and drops, oldest first, every partition whose whole range ended more than
-- p_horizon ago; returns the names dropped. Never a row at a time, never the default partition.
-- DETACH takes ACCESS EXCLUSIVE on cronwarden.outbox for an instant (CONCURRENTLY is refused
-- while a default partition exists): under a short lock timeout, so commits queue behind it for
-- at most that long, and a partition it could not take now goes at a later call. The floor
-- keeps a caller with the runtime role (which may call this) from emptying the outbox.
CREATE FUNCTION cronwarden.drop_outbox_partitions(p_horizon interval) RETURNS SETOF text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '1s'
    AS $$
DECLARE
    part record;
BEGIN
    IF p_horizon < interval '7 days' THEN
        RAISE EXCEPTION 'the outbox horizon is at least 7 days, not %', p_horizon;
    END IF;
    FOR part IN
        SELECT c.relname, cronwarden.outbox_partition_end(c.relname) AS ends
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'cronwarden.outbox'::regclass
           AND c.relnamespace = 'cronwarden_outbox'::regnamespace
           AND cronwarden.outbox_partition_end(c.relname) <= now() - p_horizon
         ORDER BY 2
    LOOP
        BEGIN
            EXECUTE format('ALTER TABLE cronwarden.outbox DETACH PARTITION cronwarden_outbox.%I',
                           part.relname);
            EXECUTE format('DROP TABLE cronwarden_outbox.%I', part.relname);
            RETURN NEXT part.relname;
        EXCEPTION WHEN lock_not_available THEN
            RAISE WARNING 'outbox partition % not dropped now: %', part.relname, SQLERRM;
            RETURN;
        END;
    END LOOP;
END
$$;

-- The swap.
DO $$
DECLARE
    bound timestamptz;
    legacy text;
BEGIN
    -- First, so nothing commits into the old table between the look below and the rename.
    LOCK TABLE cronwarden.outbox IN ACCESS EXCLUSIVE MODE;
    IF EXISTS (SELECT 1 FROM cronwarden.outbox) THEN
        IF to_regclass('cronwarden.outbox_conversion') IS NOT NULL THEN
            EXECUTE 'SELECT bound FROM cronwarden.outbox_conversion' INTO STRICT bound;
        ELSE
            SELECT (date_trunc('month', greatest(now() + interval '1 month', max(fire_time))
                                        AT TIME ZONE 'UTC') + interval '1 month')
                   AT TIME ZONE 'UTC'
              INTO bound FROM cronwarden.outbox;
        END IF;
        legacy := 'outbox_before_' || to_char(bound AT TIME ZONE 'UTC', 'YYYY_MM');
        IF to_regclass('cronwarden.outbox_key_fire_time') IS NULL THEN
            CREATE UNIQUE INDEX outbox_key_fire_time ON cronwarden.outbox (logical_key, fire_time);
        END IF;
        ALTER TABLE cronwarden.outbox DROP CONSTRAINT outbox_pkey;
        ALTER TABLE cronwarden.outbox SET SCHEMA cronwarden_outbox;
        EXECUTE format('ALTER TABLE cronwarden_outbox.outbox RENAME TO %I', legacy);
    ELSE
        DROP TABLE cronwarden.outbox;
    END IF;
    DROP TABLE IF EXISTS cronwarden.outbox_conversion;

    CREATE TABLE cronwarden.outbox (
        logical_key text NOT NULL,
        schedule_id text NOT NULL,
        fire_time timestamp with time zone NOT NULL,
        result jsonb,
        committed_at timestamp with time zone DEFAULT now() NOT NULL,
        attempt integer NOT NULL,
        fencing_token bigint NOT NULL,
        worker text NOT NULL,
        args_digest text NOT NULL,
        workflow_id text,
        run_id text
    ) PARTITION BY RANGE (fire_time);
    CREATE UNIQUE INDEX outbox_logical_key_fire_time
        ON cronwarden.outbox (logical_key, fire_time);
    CREATE INDEX outbox_schedule_fire_time ON cronwarden.outbox (schedule_id, fire_time);
    CREATE TABLE cronwarden_outbox.outbox_default PARTITION OF cronwarden.outbox DEFAULT;

    IF legacy IS NOT NULL THEN
        -- The validated CHECK implies the bound: no scan; both indexes match: none is built.
        EXECUTE format('ALTER TABLE cronwarden.outbox ATTACH PARTITION cronwarden_outbox.%I'
                       ' FOR VALUES FROM (MINVALUE) TO (%L)', legacy, bound);
        EXECUTE format('ALTER TABLE cronwarden_outbox.%I'
                       ' DROP CONSTRAINT IF EXISTS outbox_before_bound', legacy);
    END IF;
END
$$;

SELECT cronwarden.create_outbox_partitions(now() + interval '3 months');
