-- cronwarden 0017: what `schedules apply` last applied (store/applied.py).
-- Forward-only: never edit this file once released; add a new migration instead.

-- One row per schedule file that became the one in force on a task queue, in the order they
-- did. An apply of a file that an earlier row holds and a later row superseded is refused
-- (an old release's apply run again after a newer one) unless it is forced; re-applying the
-- latest file adds no row. `file_digest` is over the file's definitions, not its bytes: a
-- comment or a reordering is the same file.
CREATE TABLE cronwarden.applied_files (
    sequence    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_queue  text        NOT NULL,
    file_digest text        NOT NULL,
    schedules   integer     NOT NULL,
    forced      boolean     NOT NULL DEFAULT false,
    applied_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX applied_files_latest ON cronwarden.applied_files (task_queue, sequence DESC);

-- Per schedule: the definition apply last saw Temporal hold (its digest) and a digest of what
-- Temporal's schedule list shows of it (spec and workflow type), both from a describe. A
-- re-apply that finds both unchanged in the list needs no describe of the schedule.
CREATE TABLE cronwarden.applied_schedules (
    schedule_id       text PRIMARY KEY,
    definition_digest text        NOT NULL,
    listed_digest     text        NOT NULL,
    recorded_at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
