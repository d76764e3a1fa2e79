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
-- Name: definition_history; Type: TABLE; Schema: cronwarden; Owner: -
--

CREATE TABLE cronwarden.definition_history (
    schedule_id text NOT NULL,
    applied_at timestamp with time zone NOT NULL,
    definition_digest text NOT NULL,
    definition jsonb NOT NULL
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
    last_replay_key text
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
    CONSTRAINT incidents_kind_check CHECK ((kind = ANY (ARRAY['overdue'::text, 'never-ran'::text, 'running-too-long'::text, 'system'::text])))
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
    replay boolean DEFAULT false NOT NULL
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
    run_id text
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
-- Name: outbox outbox_pkey; Type: CONSTRAINT; Schema: cronwarden; Owner: -
--

ALTER TABLE ONLY cronwarden.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (logical_key);

--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: cronwarden; Owner: -
--

ALTER TABLE ONLY cronwarden.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

--
-- Name: heartbeats_alert_after; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX heartbeats_alert_after ON cronwarden.heartbeats USING btree (alert_after) WHERE (NOT paused);

--
-- Name: heartbeats_next_expected; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX heartbeats_next_expected ON cronwarden.heartbeats USING btree (next_expected_at) WHERE (NOT paused);

--
-- Name: heartbeats_paused; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX heartbeats_paused ON cronwarden.heartbeats USING btree (schedule_id) WHERE paused;

--
-- Name: incidents_one_open; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE UNIQUE INDEX incidents_one_open ON cronwarden.incidents USING btree (COALESCE(schedule_id, ''::text)) WHERE (resolved_at IS NULL);

--
-- Name: incidents_parent; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX incidents_parent ON cronwarden.incidents USING btree (parent_id) WHERE (parent_id IS NOT NULL);

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
-- Name: outbox_schedule_fire_time; Type: INDEX; Schema: cronwarden; Owner: -
--

CREATE INDEX outbox_schedule_fire_time ON cronwarden.outbox USING btree (schedule_id, fire_time);

--
-- Name: heartbeats heartbeats_alert_after; Type: TRIGGER; Schema: cronwarden; Owner: -
--

CREATE TRIGGER heartbeats_alert_after BEFORE INSERT OR UPDATE OF next_expected_at, grace ON cronwarden.heartbeats FOR EACH ROW EXECUTE FUNCTION cronwarden.heartbeats_set_alert_after();

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
