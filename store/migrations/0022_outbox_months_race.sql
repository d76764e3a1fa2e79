-- cronwarden 0022: two callers creating the outbox's months at once (`migrate` beside the
-- monitor's upkeep, two monitors) no longer fail: the loser of a race for a month finds it
-- created and goes on, where its whole call used to roll back (and with it the drop of months
-- past the horizon that follows the create in the upkeep).
-- Forward-only: never edit this file once released; add a new migration instead.

CREATE OR REPLACE FUNCTION cronwarden.create_outbox_partitions(p_until timestamptz) RETURNS SETOF text
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
            EXCEPTION
                WHEN duplicate_table OR unique_violation THEN
                    -- Another caller created this month between the look and the create.
                    NULL;
                WHEN lock_not_available OR check_violation THEN
                    -- Nothing is lost: that month's commits land in the default partition
                    -- until a later call attaches the month (never, if the default holds its
                    -- rows).
                    RAISE WARNING 'outbox partition % not created now: %', name, SQLERRM;
            END;
        END IF;
        m := m + interval '1 month';
    END LOOP;
END
$$;
