-- cronwarden 0007: every definition `schedules apply` wrote to Temporal, with the time Temporal
-- says it took effect. `backfill plan` and `audit` judge each part of a window by the spec in
-- force then: with only the current spec, a change inside the window would list fires that were
-- never due and miss ones that were.
-- Forward-only: never edit this file once released; add a new migration instead.

CREATE TABLE cronwarden.definition_history (
    schedule_id       text        NOT NULL,
    applied_at        timestamptz NOT NULL,
    definition_digest text        NOT NULL,
    -- The definition as apply stored it in the schedule's memo (schedules/mapping.py).
    definition        jsonb       NOT NULL,
    PRIMARY KEY (schedule_id, applied_at)
);
