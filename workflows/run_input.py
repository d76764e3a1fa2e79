"""The argument a schedule (or a backfill replay) hands to ScheduledRunWorkflow.

Kept apart from the workflow module on purpose: the workflow sandbox runs the workflow's module
again for every run, and building this dataclass (its generated __init__, __repr__ and __eq__
are compiled from source) was most of the CPU a guarded run spent beyond a bare one. Imported
through the sandbox (`imports_passed_through`), it is built once per process; it is plain data
with no behaviour, so nothing non-deterministic comes in with it. No `from __future__ import
annotations`, for the reason activities/contract.py gives: the workflow decodes it on every run.
"""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ScheduledRunInput:
    """The schedule's action argument: one object, so it can grow without breaking histories."""

    schedule_id: str
    job: str
    args: dict[str, Any] = field(default_factory=dict)
    args_digest: str = ""
    labels: dict[str, str] | None = None
    """The schedule's labels (None: none), for the worker's metrics that opted into some."""
    definition_digest: str = ""
    """The digest of the definition `schedules apply` wrote (also on the heartbeat row): the
    worker's cache of next fire times is keyed by it."""
    overlap: str = "skip"
    lock_name: str = ""
    lock_ttl_seconds: float = 60.0
    timeout_seconds: float = 900.0
    heartbeat_grace_seconds: float = 900.0
    max_attempts: int = 3
    fire_time: str | None = None
    """Set by replays (backfill, tests): the nominal fire time to run. Scheduled fires leave it
    empty and the workflow reads `TemporalScheduledStartTime`."""
    replay: bool = False
    """Set by `backfill run`: this run re-applies a past fire, it is not the schedule's live fire.
    A live fire has priority over replays for the lease, and a replay's commit never moves the
    live grid's heartbeat."""
    zone: dict[str, Any] | None = None
    """A zoned schedule's `timezone`, `crons` and `dst_repeat` (None: UTC): the guard refuses
    the second reading of a repeated wall time the rule fires once."""
    lock_wait_seconds: float | None = None
    """Set by `backfill run`: how long a replay may wait for the lease. Live fires wait at most
    their timeout."""
    min_duration_seconds: float | None = None
    """`expected_duration.min`: a run whose job ends sooner is recorded `too-fast` (None: no
    bound; inputs written before bounds existed decode with none)."""
    max_duration_seconds: float | None = None
    """`expected_duration.max`: a run whose job ends later is recorded `too-slow`."""
    late_start_seconds: float | None = None
    """`late_start`: a live run whose job starts this long after its nominal fire time is
    recorded `late-start` (replays are never judged late)."""
