-- cronwarden 0011: a lease's queue places are deleted with the lease row.
-- Forward-only: never edit this file once released; add a new migration instead.

-- Places are removed when their run takes the lease, leaves the queue, or finds its key done;
-- one abandoned by a run that died stays until the lease is next taken (0009: places expired a
-- minute ago go then). A per-fire-time lease (allow_all, `key:{logical key}`) is never taken
-- again once its key is done: its row is deleted by the schedule's per-key sweep, and the places
-- of its dead waiters would stay for ever, one set per fire. They go with the row now. A live
-- waiter losing its place this way loses nothing: its next ask makes the row and its place anew.
CREATE FUNCTION cronwarden.locks_delete_places() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM cronwarden.lock_waiters w WHERE w.name = OLD.name;
    RETURN NULL;
END
$$;

CREATE TRIGGER locks_delete_places
    AFTER DELETE ON cronwarden.locks
    FOR EACH ROW EXECUTE FUNCTION cronwarden.locks_delete_places();
