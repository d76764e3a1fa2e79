-- The schema `cronwarden migrate` builds, as pg_dump prints it: read this, not the migrations, to
-- see the tables. Never edit it: a migration changes the schema, then
-- `make schema` rewrites this file (tests/integration/test_migrations.py checks the two agree).

--
-- PostgreSQL database dump
--

--
-- Name: cronwarden; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA cronwarden;

--
-- Name: acquire_lease(text, text, double precision, text, integer, text, double precision, integer, double precision, boolean, boolean, integer); Type: FUNCTION; Schema: cronwarden; Owner: -
--

CREATE FUNCTION cronwarden.acquire_lease(p_name text, p_holder text, p_ttl_seconds double precision, p_logical_key text, p_attempt integer, p_schedule_id text, p_deadline_seconds double precision, p_priority integer, p_queue_ttl_seconds double precision, p_wait_for_any boolean, p_sweep_released boolean, p_lock_timeout_ms integer) RETURNS TABLE(token bigint, done boolean, done_digest text, queued boolean, held_for text, held_by_replay boolean, took_over boolean)
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

--
-- Name: create_outbox_partitions(timestamp with time zone); Type: FUNCTION; Schema: cronwarden; Owner: -
--

CREATE FUNCTION cronwarden.create_outbox_partitions(p_until timestamp with time zone) RETURNS SETOF text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET lock_timeout TO '2s'
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

--
-- Name: drop_outbox_partitions(interval); Type: FUNCTION; Schema: cronwarden; Owner: -
--

CREATE FUNCTION cronwarden.drop_outbox_partitions(p_horizon interval) RETURNS SETOF text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET lock_timeout TO '1s'
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

--
-- Name: heartbeats_clear_timed_pause(); Type: FUNCTION; Schema: cronwarden; Owner: -
--

CREATE FUNCTION cronwarden.heartbeats_clear_timed_pause() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.paused_until := NULL;
    NEW.unpause_error := NULL;
    NEW.unpause_failed_at := NULL;
    RETURN NEW;
END
$$;

--
-- Name: heartbeats_record_pause(); Type: FUNCTION; Schema: cronwarden; Owner: -
--

CREATE FUNCTION cronwarden.heartbeats_record_pause() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.paused AND (TG_OP = 'DELETE' OR NOT NEW.paused) THEN
        UPDATE cronwarden.pause_history
           SET resumed_at = GREATEST(paused_at, statement_timestamp())
         WHERE schedule_id = OLD.schedule_id AND resumed_at IS NULL;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.paused AND (TG_OP = 'INSERT' OR NOT OLD.paused) THEN
        INSERT INTO cronwarden.pause_history (schedule_id, paused_at, reason)
        VALUES (NEW.schedule_id, statement_timestamp(), NEW.paused_reason)
        ON CONFLICT DO NOTHING;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.paused AND NEW.paused
       AND NEW.paused_reason IS DISTINCT FROM OLD.paused_reason THEN
        UPDATE cronwarden.pause_history
           SET reason = NEW.paused_reason
         WHERE schedule_id = NEW.schedule_id AND resumed_at IS NULL;
    END IF;
    RETURN NULL;
END
$$;

--
-- Name: heartbeats_set_alert_after(); Type: FUNCTION; Schema: cronwarden; Owner: -
--

CREATE FUNCTION cronwarden.heartbeats_set_alert_after() RETURNS trigger
    LANGUAGE plpgsql
    SET "TimeZone" TO 'UTC'
    AS $$
BEGIN
    NEW.alert_after := NEW.next_expected_at + NEW.grace;
    RETURN NEW;
END
$$;

--
-- Name: locks_delete_places(); Type: FUNCTION; Schema: cronwarden; Owner: -
--

CREATE FUNCTION cronwarden.locks_delete_places() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM cronwarden.lock_waiters w WHERE w.name = OLD.name;
    RETURN NULL;
END
$$;

--
-- Name: logical_key_fire_time(text); Type: FUNCTION; Schema: cronwarden; Owner: -
--

CREATE FUNCTION cronwarden.logical_key_fire_time(p_key text) RETURNS timestamp with time zone
    LANGUAGE plpgsql STABLE
    AS $_$
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
$_$;

--
-- Name: outbox_partition_end(text); Type: FUNCTION; Schema: cronwarden; Owner: -
--

CREATE FUNCTION cronwarden.outbox_partition_end(p_name text) RETURNS timestamp with time zone
    LANGUAGE sql IMMUTABLE
    AS $_$
    SELECT CASE
        WHEN p_name ~ '^outbox_before_[0-9]{4,}_[0-9]{2}$'
            THEN to_timestamp(substr(p_name, 15) || '_01', 'YYYY_MM_DD')::timestamp
                 AT TIME ZONE 'UTC'
        WHEN p_name ~ '^outbox_[0-9]{4,}_[0-9]{2}$'
            THEN (to_timestamp(substr(p_name, 8) || '_01', 'YYYY_MM_DD')::timestamp
                  + interval '1 month') AT TIME ZONE 'UTC'
    END
$_$;

--
-- Name: outbox_record_digest(text); Type: FUNCTION; Schema: cronwarden; Owner: -
--

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

--
-- Name: applied_files; Type: TABLE; Schema: cronwarden; Owner: -
--

CREATE TABLE cronwarden.applied_files (
    sequence bigint NOT NULL,
    task_queue text NOT NULL,
    file_digest text NOT NULL,
    schedules integer NOT NULL,
    forced boolean DEFAULT false NOT NULL,
    applied_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

--
-- Name: applied_files_sequence_seq; Type: SEQUENCE; Schema: cronwarden; Owner: -
--

ALTER TABLE cronwarden.applied_files ALTER COLUMN sequence ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME cronwarden.applied_files_sequence_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: applied_schedules; Type: TABLE; Schema: cronwarden; Owner: -
--

CREATE TABLE cronwarden.applied_schedules (
    schedule_id text NOT NULL,
    definition_digest text NOT NULL,
    listed_digest text NOT NULL,
    recorded_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

--
-- Name: change_log; Type: TABLE; Schema: cronwarden; Owner: -
--

CREATE TABLE cronwarden.change_log (
    id bigint NOT NULL,
    at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    schedule_id text,
    reason text,
    details jsonb DEFAULT '{}'::jsonb NOT NULL,
    CONSTRAINT change_log_action_check CHECK ((action = ANY (ARRAY['apply'::text, 'pause'::text, 'unpause'::text, 'trigger'::text, 'delete'::text, 'backfill'::text]))),
    CONSTRAINT change_log_actor_check CHECK (((length(actor) >= 1) AND (length(actor) <= 200))),
    CONSTRAINT change_log_reason_check CHECK ((length(reason) <= 2000))
);

--
-- Name: change_log_id_seq; Type: SEQUENCE; Schema: cronwarden; Owner: -
--

ALTER TABLE cronwarden.change_log ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME cronwarden.change_log_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: definition_history; Type: TABLE; Schema: cronwarden; Owner: -
--

CREATE TABLE cronwarden.definition_history (
    schedule_id text NOT NULL,
    applied_at timestamp with time zone NOT NULL,
    definition_digest text NOT NULL,
    definition jsonb NOT NULL,
    deleted boolean DEFAULT false NOT NULL
);

--
-- Name: heartbeats; Type: TABLE; Schema: cronwarden; Owner: -
--

CREATE TABLE cronwarden.heartbeats (
    schedule_id text NOT NULL,
    last_logical_key text,
    last_fire_time timestamp with time zone,
    last_success_at timestamp with time zone,
    next_expected_at timestamp with time zone,
    grace interval DEFAULT '00:15:00'::interval NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    paused_reason text,
    last_error text,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    alert_after timestamp with time zone,
    lease_skips bigint DEFAULT 0 NOT NULL,
    last_lease_skip_key text,
    last_lease_skip_holder text,
    last_lease_skip_at timestamp with time zone,
    definition_digest text,
    last_replay_at timestamp with time zone,
    last_replay_key text,
    last_replay_error text,
    last_replay_error_key text,
    last_replay_error_at timestamp with time zone,
    compiled_until timestamp with time zone,
    duration_min interval,
    duration_max interval,
    late_start interval,
    last_run_key text,
    last_run_started_at timestamp with time zone,
    last_run_duration interval,
    last_run_breach text,
    paused_until timestamp with time zone,
    unpause_error text,
    unpause_failed_at timestamp with time zone,
    CONSTRAINT heartbeats_last_run_breach_check CHECK ((last_run_breach = ANY (ARRAY['too-fast'::text, 'too-slow'::text, 'late-start'::text])))
);

--
-- Name: incidents; Type: TABLE; Schema: cronwarden; Owner: -
--

CREATE TABLE cronwarden.incidents (
    id bigint NOT NULL,
    schedule_id text,
    kind text NOT NULL,
    summary text NOT NULL,
    details jsonb DEFAULT '{}'::jsonb NOT NULL,
    parent_id bigint,
    opened_at timestamp with time zone DEFAULT now() NOT NULL,
    resolved_at timestamp with time zone,
    resolution text,
    CONSTRAINT incidents_kind_check CHECK ((kind = ANY (ARRAY['overdue'::text, 'never-ran'::text, 'running-too-long'::text, 'system'::text, 'horizon'::text, 'too-fast'::text, 'too-slow'::text, 'late-start'::text, 'unpause-failed'::text])))
);

--
-- Name: incidents_id_seq; Type: SEQUENCE; Schema: cronwarden; Owner: -
--

ALTER TABLE cronwarden.incidents ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME cronwarden.incidents_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: lock_tokens; Type: SEQUENCE; Schema: cronwarden; Owner: -
--

CREATE SEQUENCE cronwarden.lock_tokens
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: lock_waiters; Type: TABLE; Schema: cronwarden; Owner: -
--

CREATE TABLE cronwarden.lock_waiters (
    name text NOT NULL,
    waiter text NOT NULL,
    priority smallint NOT NULL,
    logical_key text NOT NULL,
    enqueued_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    attempt integer DEFAULT 1 NOT NULL
);

--
-- Name: locks; Type: TABLE; Schema: cronwarden; Owner: -
--

CREATE TABLE cronwarden.locks (
    name text NOT NULL,
    holder text,
    attempt integer DEFAULT 1 NOT NULL,
    token bigint NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    acquired_at timestamp with time zone NOT NULL,
    logical_key text,
    schedule_id text,
    run_deadline timestamp with time zone,
    replay boolean DEFAULT false NOT NULL,
    taken_by text
);

--
-- Name: monitor_state; Type: TABLE; Schema: cronwarden; Owner: -
--

CREATE TABLE cronwarden.monitor_state (
    monitor_id text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    last_pass_at timestamp with time zone DEFAULT now() NOT NULL,
    passes bigint DEFAULT 0 NOT NULL,
    sinks text[] DEFAULT '{}'::text[] NOT NULL
);

--
-- Name: notifications; Type: TABLE; Schema: cronwarden; Owner: -
--

CREATE TABLE cronwarden.notifications (
    id bigint NOT NULL,
    incident_id bigint NOT NULL,
    event text NOT NULL,
    sink text NOT NULL,
    message jsonb NOT NULL,
    dedup_key text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    claimed_by text,
    claimed_until timestamp with time zone,
    delivered_at timestamp with time zone,
    last_error text,
    dead_at timestamp with time zone,
    CONSTRAINT notifications_event_check CHECK ((event = ANY (ARRAY['trigger'::text, 'resolve'::text])))
);

--
-- Name: notifications_id_seq; Type: SEQUENCE; Schema: cronwarden; Owner: -
--

ALTER TABLE cronwarden.notifications ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME cronwarden.notifications_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: outbox; Type: TABLE; Schema: cronwarden; Owner: -
--

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
    run_id text,
    started_at timestamp with time zone,
    duration interval,
    breach text
)
PARTITION BY RANGE (fire_time);

--
-- Name: pause_history; Type: TABLE; Schema: cronwarden; Owner: -
--

CREATE TABLE cronwarden.pause_history (
    schedule_id text NOT NULL,
    paused_at timestamp with time zone NOT NULL,
    resumed_at timestamp with time zone,
    reason text,
    CONSTRAINT pause_history_check CHECK (((resumed_at IS NULL) OR (resumed_at >= paused_at)))
);

--
-- Name: schema_migrations; Type: TABLE; Schema: cronwarden; Owner: -
--

CREATE TABLE cronwarden.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: applied_files applied_files_pkey; Type: CONSTRAINT; Schema: cronwarden; Owner: -
--

ALTER TABLE ONLY cronwarden.applied_files
    ADD CONSTRAINT applied_files_pkey PRIMARY KEY (sequence);

--
-- Name: applied_schedules applied_schedules_pkey; Type: CONSTRAINT; Schema: cronwarden; Owner: -
--

ALTER TABLE ONLY cronwarden.applied_schedules
    ADD CONSTRAINT applied_schedules_pkey PRIMARY KEY (schedule_id);

--
-- Name: change_log change_log_pkey; Type: CONSTRAINT; Schema: cronwarden; Owner: -
--

ALTER TABLE ONLY cronwarden.change_log
    ADD CONSTRAINT change_log_pkey PRIMARY KEY (id);

--
-- Name: definition_history definition_history_pkey; Type: CONSTRAINT; Schema: cronwarden; Owner: -
--

ALTER TABLE ONLY cronwarden.definition_history
    ADD CONSTRAINT definition_history_pkey PRIMARY KEY (schedule_id, applied_at);

--
-- Name: heartbeats heartbeats_pkey; Type: CONSTRAINT; Schema: cronwarden; Owner: -
--

ALTER TABLE ONLY cronwarden.heartbeats
    ADD CONSTRAINT heartbeats_pkey PRIMARY KEY (schedule_id);

--
-- Name: incidents incidents_pkey; Type: CONSTRAINT; Schema: cronwarden; Owner: -
--

ALTER TABLE ONLY cronwarden.incidents
    ADD CONSTRAINT incidents_pkey PRIMARY KEY (id);

--
-- Name: lock_waiters lock_waiters_pkey; Type: CONSTRAINT; Schema: cronwarden; Owner: -
--

ALTER TABLE ONLY cronwarden.lock_waiters
    ADD CONSTRAINT lock_waiters_pkey PRIMARY KEY (name, waiter);

--
-- Name: locks locks_pkey; Type: CONSTRAINT; Schema: cronwarden; Owner: -
--

ALTER TABLE ONLY cronwarden.locks
    ADD CONSTRAINT locks_pkey PRIMARY KEY (name);

--
-- Name: monitor_state monitor_state_pkey; Type: CONSTRAINT; Schema: cronwarden; Owner: -
--

ALTER TABLE ONLY cronwarden.monitor_state
    ADD CONSTRAINT monitor_state_pkey PRIMARY KEY (monitor_id);

--
-- Name: notifications notifications_incident_id_event_sink_key; Type: CONSTRAINT; Schema: cronwarden; Owner: -
--

ALTER TABLE ONLY cronwarden.notifications
    ADD CONSTRAINT notifications_incident_id_event_sink_key UNIQUE (incident_id, event, sink);

--
-- Name: notifications notifications_pkey; Type: CONSTRAINT; Schema: cronwarden; Owner: -
--

ALTER TABLE ONLY cronwarden.notifications
    ADD CONSTRAINT notifications_pkey PRIMARY KEY (id);

--
-- Name: pause_history pause_history_pkey; Type: CONSTRAINT; Schema: cronwarden; Owner: -
--

ALTER TABLE ONLY cronwarden.pause_history
    ADD CONSTRAINT pause_history_pkey PRIMARY KEY (schedule_id, paused_at);

--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: cronwarden; Owner: -
--

ALTER TABLE ONLY cronwarden.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

--
-- Name: applied_files_latest; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX applied_files_latest ON cronwarden.applied_files USING btree (task_queue, sequence DESC);

--
-- Name: change_log_at; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX change_log_at ON cronwarden.change_log USING btree (at, id);

--
-- Name: change_log_schedule_at; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX change_log_schedule_at ON cronwarden.change_log USING btree (schedule_id, at DESC, id DESC);

--
-- Name: heartbeats_alert_after; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX heartbeats_alert_after ON cronwarden.heartbeats USING btree (alert_after) WHERE (NOT paused);

--
-- Name: heartbeats_compiled_until; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX heartbeats_compiled_until ON cronwarden.heartbeats USING btree (compiled_until) WHERE ((compiled_until IS NOT NULL) AND (NOT paused));

--
-- Name: heartbeats_last_run_breach; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX heartbeats_last_run_breach ON cronwarden.heartbeats USING btree (schedule_id) WHERE ((last_run_breach IS NOT NULL) AND (NOT paused));

--
-- Name: heartbeats_next_expected; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX heartbeats_next_expected ON cronwarden.heartbeats USING btree (next_expected_at) WHERE (NOT paused);

--
-- Name: heartbeats_paused; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX heartbeats_paused ON cronwarden.heartbeats USING btree (schedule_id) WHERE paused;

--
-- Name: heartbeats_paused_until; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX heartbeats_paused_until ON cronwarden.heartbeats USING btree (paused_until) WHERE (paused AND (paused_until IS NOT NULL));

--
-- Name: incidents_one_open; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE UNIQUE INDEX incidents_one_open ON cronwarden.incidents USING btree (COALESCE(schedule_id, ''::text)) WHERE (resolved_at IS NULL);

--
-- Name: incidents_parent; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX incidents_parent ON cronwarden.incidents USING btree (parent_id) WHERE (parent_id IS NOT NULL);

--
-- Name: incidents_resolved; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX incidents_resolved ON cronwarden.incidents USING btree (resolved_at) WHERE (resolved_at IS NOT NULL);

--
-- Name: notifications_dead; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX notifications_dead ON cronwarden.notifications USING btree (dead_at) WHERE (dead_at IS NOT NULL);

--
-- Name: notifications_pending; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX notifications_pending ON cronwarden.notifications USING btree (next_attempt_at) WHERE ((delivered_at IS NULL) AND (dead_at IS NULL));

--
-- Name: notifications_pending_by_key; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX notifications_pending_by_key ON cronwarden.notifications USING btree (sink, dedup_key, id) WHERE ((delivered_at IS NULL) AND (dead_at IS NULL));

--
-- Name: notifications_settled; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX notifications_settled ON cronwarden.notifications USING btree (COALESCE(delivered_at, dead_at));

--
-- Name: outbox_logical_key_fire_time; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE UNIQUE INDEX outbox_logical_key_fire_time ON ONLY cronwarden.outbox USING btree (logical_key, fire_time);

--
-- Name: outbox_schedule_fire_time; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX outbox_schedule_fire_time ON ONLY cronwarden.outbox USING btree (schedule_id, fire_time);

--
-- Name: pause_history_open; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE UNIQUE INDEX pause_history_open ON cronwarden.pause_history USING btree (schedule_id) WHERE (resumed_at IS NULL);

--
-- Name: heartbeats heartbeats_alert_after; Type: TRIGGER; Schema: cronwarden; Owner: -
--

CREATE TRIGGER heartbeats_alert_after BEFORE INSERT OR UPDATE OF next_expected_at, grace ON cronwarden.heartbeats FOR EACH ROW EXECUTE FUNCTION cronwarden.heartbeats_set_alert_after();

--
-- Name: heartbeats heartbeats_clear_timed_pause; Type: TRIGGER; Schema: cronwarden; Owner: -
--

CREATE TRIGGER heartbeats_clear_timed_pause BEFORE UPDATE OF paused ON cronwarden.heartbeats FOR EACH ROW WHEN ((NOT new.paused)) EXECUTE FUNCTION cronwarden.heartbeats_clear_timed_pause();

--
-- Name: heartbeats heartbeats_record_pause; Type: TRIGGER; Schema: cronwarden; Owner: -
--

CREATE TRIGGER heartbeats_record_pause AFTER INSERT OR DELETE OR UPDATE OF paused, paused_reason ON cronwarden.heartbeats FOR EACH ROW EXECUTE FUNCTION cronwarden.heartbeats_record_pause();

--
-- Name: locks locks_delete_places; Type: TRIGGER; Schema: cronwarden; Owner: -
--

CREATE TRIGGER locks_delete_places AFTER DELETE ON cronwarden.locks FOR EACH ROW EXECUTE FUNCTION cronwarden.locks_delete_places();

--
-- Name: incidents incidents_parent_id_fkey; Type: FK CONSTRAINT; Schema: cronwarden; Owner: -
--

ALTER TABLE ONLY cronwarden.incidents
    ADD CONSTRAINT incidents_parent_id_fkey FOREIGN KEY (parent_id) REFERENCES cronwarden.incidents(id);

--
-- Name: notifications notifications_incident_id_fkey; Type: FK CONSTRAINT; Schema: cronwarden; Owner: -
--

ALTER TABLE ONLY cronwarden.notifications
    ADD CONSTRAINT notifications_incident_id_fkey FOREIGN KEY (incident_id) REFERENCES cronwarden.incidents(id);

--
-- PostgreSQL database dump complete
--
