"""What the workflow and the guarded activity exchange. Plain dataclasses of JSON types only, so
the payloads stay readable in Temporal's UI and no pickle is ever involved.

No `from __future__ import annotations` here, unlike elsewhere: Temporal's data converter calls
`typing.get_type_hints` on a dataclass every time it decodes one (the run's input in the
activity, its outcome in the workflow), and string annotations are compiled and evaluated again
on each call, several times the cost of resolving real ones: a guarded run paid it on every
hop. Everything annotated here exists at runtime.
"""

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

RUN_GUARDED = "cronwarden.run_guarded"

# Outcomes a run reports in-band (as a successful activity result), so Temporal never retries a
# decision that is final.
RAN = "ran"
ALREADY_DONE = "already-done"
OVERLAP_LOCKED = "overlap-locked"
# A zoned schedule's run at the second reading of a repeated wall time its rule fires once: no
# lease, no job, no record (the compiled spec never fires it; a replay naming it might).
NOT_IN_RULE = "not-in-rule"

# Failure types (ApplicationError.type). The first two are final: retrying cannot help.
UNKNOWN_JOB = "UnknownJob"
# Retryable: this worker lacks the job, but the retry may land on one that has it.
UNKNOWN_JOB_HERE = "UnknownJobOnThisWorker"
INVALID_ARGS = "InvalidArgs"
INVALID_RESULT = "InvalidResult"
LEASE_LOST = "LeaseLost"
COMMIT_FAILED = "CommitFailed"
ATTEMPT_ABANDONED = "AttemptAbandoned"
OVERLAP_TIMEOUT = "OverlapTimeout"
NO_FIRE_TIME = "NoFireTime"
JOB_FAILED = "JobFailed"
# Retryable, as Temporal's own start-to-close timeout was: the job ran past the schedule's
# timeout, counted from the moment its run took the lease.
JOB_TIMED_OUT = "JobTimedOut"
# Retryable: a fire skipped at the lease could not be counted, so it must not end as a success.
LEASE_SKIP_UNRECORDED = "LeaseSkipUnrecorded"
# The job ended the transaction `ctx.transaction()` opened: retrying could apply its writes twice.
TRANSACTION_ENDED = "TransactionEndedByJob"
NON_RETRYABLE_TYPES = [UNKNOWN_JOB, INVALID_ARGS, INVALID_RESULT, TRANSACTION_ENDED]

# The start of the schedule note a worker leaves when it pauses a schedule whose job it does not
# have; `status` recognises orphaned schedules by it.
ORPHAN_NOTE_PREFIX = "paused by cronwarden: job "

KEY_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

# The schedule action's memo key holding the definition digest `schedules apply` wrote; the
# worker reads it back from a described schedule to know which definition its times belong to.
DIGEST_MEMO = "cronwarden_digest"


def logical_key(schedule_id: str, fire_time: datetime) -> str:
    """`{schedule_id}@{fire time, UTC, whole seconds}`: the name of a run everywhere."""
    return f"{schedule_id}@{format_fire_time(fire_time)}"


def fire_time_of_key(schedule_id: str, key: str) -> datetime | None:
    """The fire time `key` names if it is exactly a logical key of the schedule, else None."""
    prefix = f"{schedule_id}@"
    if not key.startswith(prefix):
        return None
    try:
        fire_time = parse_fire_time(key[len(prefix) :])
    except ValueError:
        return None
    return fire_time if logical_key(schedule_id, fire_time) == key else None


# allow_all runs take one lease per logical key, named with this prefix; no shared lock may
# start with it (schedules/model.py), and the per-key sweep deletes only such rows.
PER_KEY_LOCK_PREFIX = "key:"


def per_key_lock_name(key: str) -> str:
    """The lease of one logical key's runs (allow_all): `key:{schedule_id}@{fire time}`."""
    return f"{PER_KEY_LOCK_PREFIX}{key}"


def format_fire_time(fire_time: datetime) -> str:
    if fire_time.tzinfo is None:
        raise ValueError(f"fire time {fire_time!r} has no time zone; cronwarden works in UTC")
    return fire_time.astimezone(UTC).strftime(KEY_TIME_FORMAT)


def nominal_fire_time(
    *, schedule_id: str, workflow_id: str, scheduled_start: datetime | None
) -> datetime | None:
    """The nominal fire time of a run a schedule started, None when neither source has one.

    Temporal names such a run `{schedule id}-{nominal time, RFC 3339}` and puts the same
    nominal time in `TemporalScheduledStartTime`; under jitter the run itself starts later.
    The id's suffix is nominal by construction (Temporal dedupes fires on it), so it wins if the
    search attribute ever carried the jittered time instead: the key must name the slot, or a
    jittered fire and its replay would be two keys. A schedule id has no ':' or capitals, so
    `{id}-` cannot swallow part of another schedule's id.
    """
    prefix = f"{schedule_id}-"
    if workflow_id.startswith(prefix):
        try:
            return parse_fire_time(workflow_id[len(prefix) :])
        except ValueError:
            pass
    return None if scheduled_start is None else parse_fire_time(scheduled_start.isoformat())


def parse_fire_time(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"fire time '{text}' has no time zone; give it in UTC (…Z)")
    return value.astimezone(UTC).replace(microsecond=0)


@dataclass
class GuardedRunInput:
    schedule_id: str
    logical_key: str
    fire_time: str
    """ISO 8601, UTC."""
    job: str
    args: dict[str, Any]
    args_digest: str
    lock_name: str
    lock_ttl_seconds: float
    heartbeat_grace_seconds: float
    labels: dict[str, str] | None = None
    """The schedule's labels (None: none), counted in the worker's metrics when opted in."""
    definition_digest: str = ""
    """The digest of the schedule definition this run was fired from (empty: unknown)."""
    replay: bool = False
    """A `backfill run` replay of a past fire, not the schedule's live fire."""
    lock_wait_seconds: float = 0.0
    """How long this run may wait for the lease (it waits behind a replay, and for any holder
    when `wait_for_any`) before ending `overlap-locked`."""
    wait_for_any: bool = False
    """Wait whoever holds the lease (buffer_one fires, replays); else only behind a replay."""
    per_key_lease: bool = False
    """`lock_name` names this fire time's own lease (allow_all), not one the schedule reuses."""
    timeout_seconds: float | None = None
    """The job's own timeout, for the lease's run deadline (the activity's start-to-close also
    covers the wait for the lease)."""
    zone: dict[str, Any] | None = None
    """A zoned schedule's `timezone`, `crons` and `dst_repeat` (None: UTC)."""
    min_duration_seconds: float | None = None
    """The schedule's `expected_duration.min` (None: no bound), judged at commit."""
    max_duration_seconds: float | None = None
    """The schedule's `expected_duration.max` (None: no bound), judged at commit."""
    late_start_seconds: float | None = None
    """The schedule's `late_start` (None: no bound); a replay is never judged late."""


@dataclass
class RunOutcome:
    outcome: str
    """`ran`, `already-done`, `overlap-locked` or `not-in-rule`."""
    logical_key: str
    result: dict[str, Any] | None = None
    fencing_token: int | None = None
    attempt: int = 1
    args_mismatch: bool = False
    """The key was done with other args than this run's (reported, never re-run)."""
    held_by: str | None = None
    """For `overlap-locked`: the logical key holding the lease."""
    notes: list[str] = field(default_factory=list)
