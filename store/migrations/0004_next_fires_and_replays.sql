-- cronwarden 0004: which schedule definition a heartbeat row describes, and replays recorded
-- apart from the live grid.
-- Forward-only: never edit this file once released; add a new migration instead.

-- Written by `schedules apply` (the digest it stores in the schedule's action memo). A worker's
-- cached next fire times are accepted by the run's commit only when they were computed for this
-- definition: times described before an apply changed the spec must not set the deadline.
-- NULL: applied before this column existed; such a row takes the times as before.
ALTER TABLE cronwarden.heartbeats ADD COLUMN definition_digest text;

-- A `backfill run` replay's commit records itself here and never touches the live fields
-- (last success, next expected fire, last error): a replay must not hide a live fire that has
-- not committed.
ALTER TABLE cronwarden.heartbeats ADD COLUMN last_replay_at timestamptz;
ALTER TABLE cronwarden.heartbeats ADD COLUMN last_replay_key text;
