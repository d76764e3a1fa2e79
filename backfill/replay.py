"""`backfill run`: replay chosen fire times of a schedule through the normal guarded run.

A replay starts `ScheduledRunWorkflow` directly with the schedule's own action input plus
`fire_time`, under the workflow id `{schedule_id}~replay-{fire time}`, a form no schedule's own
run id (`{schedule_id}-{fire time}`) can take (schedules/run_ids.py): a manual start that takes
an id a schedule will generate can wedge that schedule (temporalio/temporal#10579). The id reuse
policy is ALLOW_DUPLICATE, so Temporal does not dedupe replays of a key that already closed: the
guard does (outbox check, lease, ON CONFLICT in the commit), and a replay of a committed key
reports `already-done`.

Every run of one schedule takes the same lease (`schedule:{id}` or its shared lock; per key for
allow_all), so a schedule's replays apply one at a time whatever the concurrency: concurrency
only overlaps Temporal's round trips with the job of the replay holding the lease. A replay that
finds the lease held waits in its queue (activities/lease.py), behind every live fire and the
replays queued before it, until `lock_wait` has passed for that key; only then is it reported
`overlap-locked`.

Each key runs the definition that was in force at its fire time: the definition_history row that
judged that part of the window in the plan, its job, args (and their digest), timeouts and
attempts rebuilt into the run's input; the lease (lock and overlap) and the task queue are
today's, so a replay keeps out of today's runs whatever lock its time had. The outbox then
records the args digest of that definition, and the job sees the args it was given then. A key
whose definition cannot be trusted to run is skipped and reported instead
(`Definitions.resolve`), unless the operator asked for the current definition
(`--with-current-definition`).
"""

from __future__ import annotations

import asyncio
import random
import time
from array import array
from bisect import bisect_right
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from cronwarden.activities.contract import (
    ALREADY_DONE,
    NOT_IN_RULE,
    OVERLAP_LOCKED,
    RAN,
    RunOutcome,
    format_fire_time,
    logical_key,
)
from cronwarden.activities.jobs import InvalidArgs, JobRegistry, UnknownJob
from cronwarden.backfill.plan import Judged, ManagedSchedule, keys_of
from cronwarden.backfill.spec_history import UNRECORDED, Applied
from cronwarden.logs import get_logger
from cronwarden.schedules.mapping import execution_timeout, run_input
from cronwarden.schedules.overridden_args import OverriddenArgs
from cronwarden.schedules.run_ids import replay_workflow_id
from cronwarden.times import utc_text
from cronwarden.workflows.scheduled_run import WORKFLOW_NAME, ScheduledRunInput

REPLAYED = "replayed"
FAILED = "failed"
OUTCOMES = (REPLAYED, ALREADY_DONE, OVERLAP_LOCKED, FAILED)
"""The outcomes every summary counts, zero or not. A summary counts `not-in-rule` (a zoned
schedule's rule refused the key: the second reading of a repeated wall time it fires once) only
once one happens: nothing ran and nothing is owed, so it is neither replayed nor failed; a plan
never lists such a key, only a key named by hand can be one, and the summaries of every other
replay keep their shape."""

FIRST_RETRY_DELAY = 0.25
MAX_RETRY_DELAY = 5.0

log = get_logger("cronwarden.backfill")


CURRENT = "current"
HISTORY = "history"


@dataclass(frozen=True)
class RunDefinition:
    """The definition a replay runs: a recorded one (`history`) or the live schedule's."""

    source: str
    """`history`, `unrecorded` (Temporal's memo of a definition whose row was lost) or
    `current`."""
    # Out of eq and hash: a definition is named by its source, applied_at and digest (the summary
    # counts keys per definition), and the input is a mutable dataclass that cannot be hashed.
    run_input: ScheduledRunInput = field(compare=False)
    """Without `fire_time`: the same for every key this definition replays."""
    execution_timeout: timedelta | None = field(compare=False)
    applied_at: datetime | None = None
    digest: str | None = None
    args_from: str | None = None
    """Where the args that replaced the definition's own came from (`--args-file`), else None."""

    def as_json(self) -> dict[str, Any]:
        overridden = (
            {"args_from": self.args_from, "args_digest": self.run_input.args_digest}
            if self.args_from is not None
            else {}
        )
        return {
            "source": self.source,
            "applied_at": utc_text(self.applied_at) if self.applied_at else None,
            "digest": self.digest,
        } | overridden

    def text(self) -> str:
        return self._definition_text() + (
            f", with the args of {self.args_from} (args digest {self.run_input.args_digest})"
            if self.args_from is not None
            else ""
        )

    def _definition_text(self) -> str:
        if self.applied_at is None:
            return "the current definition"
        if self.source == UNRECORDED:
            return (
                f"the definition Temporal holds since {utc_text(self.applied_at)} (digest "
                f"{self.digest}; its history row was lost)"
            )
        return f"the definition applied {utc_text(self.applied_at)} (digest {self.digest})"

    def with_args(self, given: OverriddenArgs | None) -> RunDefinition:
        """This definition with `given` args in place of its own (None: as it is)."""
        if given is None:
            return self
        inp = replace(self.run_input, args=dict(given.args), args_digest=given.digest)
        return replace(self, run_input=inp, args_from=given.source)


def current_definition(schedule: ManagedSchedule) -> RunDefinition:
    """What the live schedule's action starts its runs with today."""
    return RunDefinition(
        CURRENT,
        schedule.run_input,
        schedule.execution_timeout,
        digest=schedule.run_input.definition_digest or None,
    )


class Definitions:
    """For each fire time, the definition its replay runs, or why it is not replayed.

    `judged` is the plan's list of parts, each with the history row (by applied_at) that judged
    it; `history` the schedule's recorded definitions. A key is skipped when:

    - no recorded definition covers its time: what ran then is unknown, and today's may be
      another job or other args altogether;
    - the recorded definition ran another job than the live schedule runs: the CLI cannot see
      a worker's registry, and a job that was replaced (or an id whose entry was swapped with
      another's) is the case where the old job is most likely gone from the workers, or must
      not run again;
    - with `registry` (the job modules of CRONWARDEN_JOBS, as `apply` loads them): its job is
      not registered there, or its recorded args no longer pass the job's model. The run would
      only fail on the worker; the operator learns it before anything starts.

    With `with_current` such a key runs the live schedule's definition instead (reported as
    `current`), which is what the operator asked for.

    With `args` (`--args-file`, checked against the live job's model before anything starts)
    every key runs them in place of its definition's own: a recorded definition is then not
    judged by its recorded args, which no replay will use.
    """

    def __init__(
        self,
        schedule: ManagedSchedule,
        judged: Sequence[Judged],
        history: Sequence[Applied],
        *,
        with_current: bool = False,
        registry: JobRegistry | None = None,
        args: OverriddenArgs | None = None,
    ) -> None:
        self._schedule = schedule
        self._registry = registry
        self._args = args
        self._current = current_definition(schedule).with_args(args)
        self._with_current = with_current
        self._parts = list(judged)
        self._starts = [int(j.window.start.timestamp()) for j in self._parts]
        self._history = {a.applied_at: a for a in history}
        self._resolved: dict[datetime, RunDefinition | str] = {}

    def resolve(self, fire_time: datetime) -> RunDefinition | str:
        """The definition to run for `fire_time`, or the reason it is skipped."""
        found = self._recorded(fire_time)
        if isinstance(found, RunDefinition):
            return found
        if self._with_current:
            return self._current
        return f"{found}; pass --with-current-definition to replay it with the current one"

    def _recorded(self, fire_time: datetime) -> RunDefinition | str:
        i = bisect_right(self._starts, int(fire_time.timestamp())) - 1
        part = self._parts[i] if i >= 0 else None
        if part is None or part.applied_at is None:
            return "no recorded definition covers this time"
        # Parts come in the hundreds at most, keys in the hundreds of thousands: one rebuild per
        # part.
        cached = self._resolved.get(part.applied_at)
        if cached is None:
            cached = self._resolved[part.applied_at] = self._rebuild(part.applied_at)
        return cached

    def _rebuild(self, applied_at: datetime) -> RunDefinition | str:
        applied = self._history.get(applied_at)
        if applied is None:
            # The plan read a row this read did not: history rows are never deleted, so only a
            # schedule deleted and re-created in between gets here.
            return f"the definition applied {utc_text(applied_at)} is no longer recorded"
        try:
            defn = applied.rebuilt()
        except Exception as exc:
            return f"the definition applied {utc_text(applied_at)} no longer reads: {exc}"
        live_job = self._schedule.run_input.job
        if defn.job != live_job:
            return (
                f"the definition in force then (applied {utc_text(applied_at)}) ran job "
                f"'{defn.job}', the schedule runs '{live_job}' now"
            )
        if self._registry is not None and self._args is None:
            try:
                self._registry.get(defn.job).validate_args(defn.args)
            except (UnknownJob, InvalidArgs) as exc:
                return (
                    f"the definition in force then (applied {utc_text(applied_at)}) no longer "
                    f"runs here: {exc}"
                )
        # The live task queue, not the recorded one: the queue only routes the run to today's
        # workers (a queue renamed since has none), it does not change what runs. The live lease
        # too (lock and overlap): the lease is how the schedule's runs keep out of each other
        # now, live fires and replays alike. A replay under the lock of its time would run
        # beside a replay or a live fire under today's.
        live = self._schedule.run_input
        inp = replace(
            run_input(defn, task_queue=self._schedule.task_queue),
            lock_name=live.lock_name,
            overlap=live.overlap,
        )
        # The digest recorded with the row, not one recomputed under today's mapping version:
        # it names the definition that judged the key.
        inp = replace(inp, definition_digest=applied.digest)
        source = UNRECORDED if applied.inferred == UNRECORDED else HISTORY
        chosen = RunDefinition(source, inp, execution_timeout(defn), applied_at, applied.digest)
        return chosen.with_args(self._args)


@dataclass(frozen=True)
class ReplayResult:
    logical_key: str
    workflow_id: str
    outcome: str
    """`replayed`, `already-done`, `overlap-locked`, `failed`, `not-in-rule` (a zoned
    schedule's rule never fires this instant: nothing ran), or `skipped` (not started)."""
    detail: str | None = None
    definition: RunDefinition | None = None
    """What the replay ran; None for a skipped key."""
    args_mismatch: bool = False
    """`already-done` with other args than the replay's: an args conflict, reported, never
    re-run."""


SKIPPED = "skipped"


@dataclass
class Summary:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    failures: list[ReplayResult] = field(default_factory=list)
    skipped: list[ReplayResult] = field(default_factory=list)
    """Keys not replayed because of their definition (`Definitions`); not in `counts`, which
    only counts runs started."""
    by_definition: dict[RunDefinition, int] = field(default_factory=dict)
    """How many keys each definition replayed (whatever their outcome)."""
    conflicts: list[ReplayResult] = field(default_factory=list)
    """Keys found done with other args than their replay's (counted `already-done` too)."""

    def add(self, result: ReplayResult) -> None:
        if result.outcome == SKIPPED:
            self.skipped.append(result)
            return
        self.counts[result.outcome] = self.counts.get(result.outcome, 0) + 1
        if result.outcome == FAILED:
            self.failures.append(result)
        if result.args_mismatch:
            self.conflicts.append(result)
        if result.definition is not None:
            self.by_definition[result.definition] = self.by_definition.get(result.definition, 0) + 1

    def definitions_json(self) -> list[dict[str, Any]]:
        return [d.as_json() | {"keys": n} for d, n in self.by_definition.items()]


@dataclass
class Preview:
    """What `replay_all` would do with a plan's keys (`--dry-run`), held as compactly as the
    plan: a year of skipped keys is two arrays and a handful of reasons, not an object each."""

    by_definition: dict[RunDefinition, int] = field(default_factory=dict)
    skipped_seconds: array[int] = field(default_factory=lambda: array("q"))
    skipped_reasons: array[int] = field(default_factory=lambda: array("i"))
    reasons: list[str] = field(default_factory=list)

    @property
    def skipped_count(self) -> int:
        return len(self.skipped_seconds)

    def definitions_json(self) -> list[dict[str, Any]]:
        return [d.as_json() | {"keys": n} for d, n in self.by_definition.items()]

    def iter_skipped(self, schedule_id: str) -> Iterator[tuple[str, str]]:
        """(logical key, reason) of each key that would be skipped, in time order."""
        keys = keys_of(schedule_id, self.skipped_seconds)
        return ((k, self.reasons[r]) for k, r in zip(keys, self.skipped_reasons, strict=True))


def would_run(definitions: Definitions, seconds: Iterable[int]) -> Preview:
    """What `replay_all` would run for these fire times (epoch seconds), started nothing: the
    keys per definition, and the keys it would skip with why (`--dry-run`)."""
    preview = Preview()
    index: dict[str, int] = {}
    for s in seconds:
        chosen = definitions.resolve(datetime.fromtimestamp(s, UTC))
        if isinstance(chosen, str):
            if chosen not in index:
                index[chosen] = len(preview.reasons)
                preview.reasons.append(chosen)
            preview.skipped_seconds.append(s)
            preview.skipped_reasons.append(index[chosen])
        else:
            preview.by_definition[chosen] = preview.by_definition.get(chosen, 0) + 1
    return preview


async def replay_one(
    client: Client,
    schedule: ManagedSchedule,
    fire_time: datetime,
    *,
    lock_wait: float,
    definitions: Definitions | None = None,
) -> ReplayResult:
    """Replay one key with the definition `definitions` gives for its time (the live one when
    not given), or report it skipped."""
    key = logical_key(schedule.schedule_id, fire_time)
    workflow_id = replay_workflow_id(schedule.schedule_id, fire_time)
    chosen = current_definition(schedule) if definitions is None else definitions.resolve(fire_time)
    if isinstance(chosen, str):
        log.warning(
            "replay.skipped", schedule_id=schedule.schedule_id, logical_key=key, reason=chosen
        )
        return ReplayResult(key, workflow_id, SKIPPED, chosen)
    inp = replace(chosen.run_input, fire_time=format_fire_time(fire_time), replay=True)
    # The args it runs, by digest, on every event of the key: `--args-file` may replace them.
    bound = log.bind(
        schedule_id=schedule.schedule_id,
        logical_key=key,
        workflow_id=workflow_id,
        args_digest=inp.args_digest,
    )
    give_up_at = time.monotonic() + lock_wait
    delay = FIRST_RETRY_DELAY
    while True:
        # The run waits for the lease inside its activity, in the lease's queue (live fires
        # first, replays in arrival order), for what is left of `lock_wait`.
        left = max(give_up_at - time.monotonic(), 0.0)
        try:
            handle, attached = await _start_or_attach(
                client,
                schedule,
                replace(inp, lock_wait_seconds=left),
                workflow_id,
                lock_wait,
                definition=chosen,
            )
            outcome = await handle.result()
        except Exception as exc:
            # A failed run, a refused start, a dropped connection: this key fails, the other
            # replays go on, and the summary counts it.
            detail = _error_detail(exc)
            bound.warning("replay.failed", error=detail)
            return ReplayResult(key, workflow_id, FAILED, detail, chosen)
        left = give_up_at - time.monotonic()
        if outcome.outcome == OVERLAP_LOCKED and left > 0:
            # The run's wait was cut short (a retried attempt, a run we attached to): try again
            # for the rest of `lock_wait`, never giving up before it has passed.
            await asyncio.sleep(min(delay * random.uniform(0.5, 1.0), left))
            delay = min(delay * 2, MAX_RETRY_DELAY)
            continue
        result = replace(_classify(key, workflow_id, outcome, attached=attached), definition=chosen)
        bound.info(
            f"replay.{result.outcome}",
            detail=result.detail,
            definition=chosen.as_json(),
            args_mismatch=result.args_mismatch,
        )
        return result


async def replay_all(
    client: Client,
    schedule: ManagedSchedule,
    fire_times: Iterable[datetime],
    *,
    concurrency: int,
    lock_wait: float,
    on_result: Callable[[ReplayResult], None] | None = None,
    definitions: Definitions | None = None,
    held: Callable[[], Awaitable[str | None]] | None = None,
) -> Summary:
    """Replay each fire time once, at most `concurrency` at a time, waiting for every result.
    Each runs the definition `definitions` gives for its time (the live one when not given).

    `held` is asked before each key is started: a reason (the schedule was paused while the
    replays ran) skips the key, and every key after it, unstarted: an operator's pause made
    during a long backfill holds its replays too, not only the fires to come.
    """
    summary = Summary()
    pending = iter(fire_times)

    async def worker() -> None:
        # One shared iterator: each worker takes the next fire time when it is free, so at most
        # `concurrency` replays are in flight and none is started twice.
        for fire_time in pending:
            reason = await held() if held is not None else None
            if reason is not None:
                key = logical_key(schedule.schedule_id, fire_time)
                wid = replay_workflow_id(schedule.schedule_id, fire_time)
                result = ReplayResult(key, wid, SKIPPED, reason)
            else:
                result = await replay_one(
                    client, schedule, fire_time, lock_wait=lock_wait, definitions=definitions
                )
            summary.add(result)
            if on_result is not None:
                on_result(result)

    async with asyncio.TaskGroup() as group:
        for _ in range(max(1, concurrency)):
            group.create_task(worker())
    return summary


async def _start_or_attach(
    client: Client,
    schedule: ManagedSchedule,
    inp: object,
    workflow_id: str,
    lock_wait: float = 0.0,
    *,
    definition: RunDefinition | None = None,
) -> tuple[WorkflowHandle[object, RunOutcome], bool]:
    # The bound of the definition the replay runs; the live schedule's unless one is given.
    timeout = schedule.execution_timeout if definition is None else definition.execution_timeout
    try:
        handle: WorkflowHandle[object, RunOutcome] = await client.start_workflow(
            WORKFLOW_NAME,
            inp,
            id=workflow_id,
            task_queue=schedule.task_queue,
            # The schedule's bound on a run, plus the replay's own wait for the lease.
            execution_timeout=timeout + timedelta(seconds=lock_wait) if timeout else None,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            result_type=RunOutcome,
        )
        return handle, False
    except WorkflowAlreadyStartedError:
        # A replay of this very key is running (a second `backfill run` at the same time): wait
        # for its result instead of failing. Starting our own would only end `overlap-locked`
        # or `already-done` behind it, and attaching reports what actually happened.
        return client.get_workflow_handle(workflow_id, result_type=RunOutcome), True


def _classify(key: str, workflow_id: str, outcome: RunOutcome, *, attached: bool) -> ReplayResult:
    if outcome.outcome == RAN:
        if attached:
            # Another backfill's replay ran it: done, but not by us.
            return ReplayResult(key, workflow_id, ALREADY_DONE, "replayed by a concurrent run")
        return ReplayResult(key, workflow_id, REPLAYED)
    if outcome.outcome == ALREADY_DONE:
        detail = "; ".join(outcome.notes) or None
        return ReplayResult(
            key, workflow_id, ALREADY_DONE, detail, args_mismatch=outcome.args_mismatch
        )
    if outcome.outcome == OVERLAP_LOCKED:
        return ReplayResult(
            key, workflow_id, OVERLAP_LOCKED, f"lease held by {outcome.held_by or 'another run'}"
        )
    if outcome.outcome == NOT_IN_RULE:
        # The guard's refusal names the first reading, the instant the rule does fire.
        return ReplayResult(key, workflow_id, NOT_IN_RULE, "; ".join(outcome.notes) or None)
    return ReplayResult(key, workflow_id, FAILED, f"unexpected outcome {outcome.outcome!r}")


def _error_detail(exc: Exception) -> str:
    if isinstance(exc, RPCError):
        return f"Temporal refused the replay ({exc.status.name}): {exc.message}"
    if not isinstance(exc, WorkflowFailureError):
        return f"{type(exc).__name__}: {exc}"
    # The innermost cause is the job's own error (or the guard's), not "activity failed".
    cause: BaseException | None = exc.cause
    messages = []
    while cause is not None:
        messages.append(str(cause))
        cause = cause.__cause__
    return messages[-1] if messages else str(exc)
