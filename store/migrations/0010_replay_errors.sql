-- cronwarden 0010: a failed `backfill run` replay records its error apart from the live one.
-- Forward-only: never edit this file once released; add a new migration instead.

-- Before this, a failed replay wrote `last_error`, which `status`, the status page and the
-- monitor's overdue pages show as the live schedule's error, and which the orphan check reads
-- (an "unknown job" error there means the worker paused the live schedule). A replay re-runs
-- a past fire: its failure says nothing about the live grid. It is kept here, with the key
-- that failed and when, and cleared only by a replay of that same key that commits (a replay
-- of another key succeeding does not mean the failed one was done).
ALTER TABLE cronwarden.heartbeats ADD COLUMN last_replay_error text;
ALTER TABLE cronwarden.heartbeats ADD COLUMN last_replay_error_key text;
ALTER TABLE cronwarden.heartbeats ADD COLUMN last_replay_error_at timestamptz;
