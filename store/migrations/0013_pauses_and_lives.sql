-- cronwarden 0013: what `backfill` needs to tell a missed fire from one nobody wanted.
-- Forward-only: never edit this file once released; add a new migration instead.

-- 1. Operator pauses, kept after they end. The heartbeat row says whether a schedule is paused
-- now; a fire that fell inside a pause lifted since was held on purpose (a ledger migration),
-- and `backfill run` must not apply it later as if it had been lost. The rows are written by a
-- trigger on the heartbeat's `paused` flag, so every path that sets or lifts it (schedules
-- pause/unpause, the monitor lifting a pause Temporal no longer holds, apply forgetting the
-- pause of a deleted schedule, a delete) leaves its trace in the same transaction as the flag.
-- Times are Postgres' clock at the statement that changed the flag: `schedules pause` writes
-- Temporal first and the row after, `unpause` the row first and Temporal after, so a recorded
-- pause sits inside the one Temporal held, by the length of one round trip at each end.
CREATE TABLE cronwarden.pause_history (
    schedule_id text        NOT NULL,
    paused_at   timestamptz NOT NULL,
    -- NULL: paused now.
    resumed_at  timestamptz,
    reason      text,
    PRIMARY KEY (schedule_id, paused_at),
    CHECK (resumed_at IS NULL OR resumed_at >= paused_at)
);

-- At most one open pause per schedule.
CREATE UNIQUE INDEX pause_history_open ON cronwarden.pause_history (schedule_id)
    WHERE resumed_at IS NULL;

CREATE FUNCTION cronwarden.heartbeats_record_pause() RETURNS trigger
LANGUAGE plpgsql AS $$
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
    RETURN NULL;
END
$$;

CREATE TRIGGER heartbeats_record_pause
    AFTER INSERT OR DELETE OR UPDATE OF paused ON cronwarden.heartbeats
    FOR EACH ROW EXECUTE FUNCTION cronwarden.heartbeats_record_pause();

-- Pauses standing when this migration runs: their start is not known, the row's last update is
-- the latest it can be. Starting late only lists a few of the pause's first fires as missing
-- (seen, and refused by `backfill run` while the schedule stays paused), never the reverse.
INSERT INTO cronwarden.pause_history (schedule_id, paused_at, reason)
SELECT schedule_id, updated_at, paused_reason FROM cronwarden.heartbeats WHERE paused;

-- 2. The end of a schedule's life. A schedule id deleted and created again is two schedules in
-- Temporal, and the outbox keys of both share the id: the history must say where the first one
-- ended, or the time between the two lives is planned as missed fires of the first. A deleted
-- row (written by `schedules delete` and `apply --prune`, at Temporal's clock just before the
-- delete) carries no definition: no fire is due after it until the next row (a create).
ALTER TABLE cronwarden.definition_history ADD COLUMN deleted boolean NOT NULL DEFAULT false;
