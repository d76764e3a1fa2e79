-- cronwarden 0021: a pause re-issued with a new reason (`schedules pause` again, "DO NOT RUN"
-- after "test run") carries the new reason in its history too: `backfill plan` and `audit`
-- print the reason the operator gave last, as the heartbeat row does.
-- Forward-only: never edit this file once released; add a new migration instead.

CREATE OR REPLACE FUNCTION cronwarden.heartbeats_record_pause() RETURNS trigger
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
    IF TG_OP = 'UPDATE' AND OLD.paused AND NEW.paused
       AND NEW.paused_reason IS DISTINCT FROM OLD.paused_reason THEN
        UPDATE cronwarden.pause_history
           SET reason = NEW.paused_reason
         WHERE schedule_id = NEW.schedule_id AND resumed_at IS NULL;
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER heartbeats_record_pause ON cronwarden.heartbeats;
CREATE TRIGGER heartbeats_record_pause
    AFTER INSERT OR DELETE OR UPDATE OF paused, paused_reason ON cronwarden.heartbeats
    FOR EACH ROW EXECUTE FUNCTION cronwarden.heartbeats_record_pause();
