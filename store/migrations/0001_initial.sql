-- cronwarden 0001: locks, outbox and heartbeats.
-- Forward-only: never edit this file once released; add 0002_... instead.

-- Fencing tokens come from one sequence, so a token handed out later is always larger, even
-- across lock rows that were deleted and created again.
CREATE SEQUENCE cronwarden.lock_tokens AS bigint;

CREATE TABLE cronwarden.locks (
    name        text PRIMARY KEY,
    holder      text,                    -- NULL once released
    attempt     integer     NOT NULL DEFAULT 1,  -- the holder's Temporal attempt
    token       bigint      NOT NULL,    -- fencing token of the current (or last) holder
    expires_at  timestamptz NOT NULL,    -- database time; the worker's clock is never consulted
    acquired_at timestamptz NOT NULL,
    logical_key text                     -- the run holding it, for operators
);

CREATE TABLE cronwarden.outbox (
    logical_key   text PRIMARY KEY,      -- {schedule_id}@{fire time}: at most one record per fire
    schedule_id   text        NOT NULL,
    fire_time     timestamptz NOT NULL,
    result        jsonb,
    committed_at  timestamptz NOT NULL DEFAULT now(),
    attempt       integer     NOT NULL,
    fencing_token bigint      NOT NULL,
    worker        text        NOT NULL,
    args_digest   text        NOT NULL,  -- sha256 of the args the key ran with
    workflow_id   text,
    run_id        text
);

-- Backfill and audit ask "which fire times of this schedule are done" over a window.
CREATE INDEX outbox_schedule_fire_time ON cronwarden.outbox (schedule_id, fire_time);

CREATE TABLE cronwarden.heartbeats (
    schedule_id      text PRIMARY KEY,
    last_logical_key text,
    last_fire_time   timestamptz,
    last_success_at  timestamptz,
    next_expected_at timestamptz,
    grace            interval    NOT NULL DEFAULT interval '15 minutes',
    paused           boolean     NOT NULL DEFAULT false,
    paused_reason    text,
    last_error       text,
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- The absence monitor only ever scans schedules that are expected to fire.
CREATE INDEX heartbeats_next_expected ON cronwarden.heartbeats (next_expected_at) WHERE NOT paused;
