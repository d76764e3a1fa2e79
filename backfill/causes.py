"""Why a slot has no commit: one judgement per missing, running or held fire time, made here
and shown by `backfill plan`, `audit`, `schedules describe`, `status` and the status page.

The judgement (`judge`) is a pure function of the evidence `backfill/evidence.py` gathers once
per window (the schedule's runs with their start and close times, what the runs in flight wait
on, why failed runs failed), so every rule is tested with plain values. A year of missing slots
is judged as integers in one pass and summarised by cause (a count, the first and last, a few
example keys, the command that closes the gap); only `NAMED` slots are kept one by one.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from temporalio.client import ScheduleDescription

from cronwarden.activities.contract import format_fire_time, logical_key
from cronwarden.store.pause_history import Pause
from cronwarden.times import utc_text, utc_text_or_none

# Causes: stable names, part of the `--json` documents.
COMMITTED = "committed"
REPLAYED = "replayed"
RUNNING = "running"
WAITING_FOR_LEASE = "waiting-for-lease"
SKIPPED_OVERLAP = "skipped-overlap"
"""Temporal's overlap policy dropped the fire: a run of an earlier slot was still open."""
MISSED_CATCHUP = "missed-catchup"
"""No run started and none was open: Temporal was down or behind longer than the catchup
window, dropped the fire and only counted it."""
NO_WORKER_POLLING = "no-worker-polling"
NO_WORKER_WITH_JOB_CAUSE = "no-worker-with-job"
FAILED = "failed"
SKIPPED_LEASE = "skipped-lease"
PAUSED_OPERATOR = "paused-operator"
PAUSED_TEMPORAL = "paused-temporal"
"""Paused in Temporal without `schedules pause` (pause_on_failure, a worker missing the job)."""
OFF_GRID = "off-grid"
UNKNOWN = "unknown"

NAMED = 50
"""Slots judged one by one and kept with their own detail; the rest are only counted."""
EXAMPLES = 5
"""Example keys per cause."""


@dataclass(frozen=True)
class Run:
    """One run of the schedule as visibility lists it."""

    fire_s: int
    workflow_id: str
    run_id: str | None
    replay: bool
    started: datetime
    closed: datetime | None
    """None: still open."""
    status: str
    """Temporal's status, lower case (`running`, `completed`, `failed`, `timed_out` ...)."""


@dataclass(frozen=True)
class RunDetail:
    """What a describe (in flight) or the closing history (failed) adds to a run."""

    cause: str
    text: str
    attempt: int | None = None
    worker: str | None = None
    since: datetime | None = None


@dataclass(frozen=True)
class Evidence:
    """Everything `judge` reads, gathered once per window (`gather`)."""

    schedule_id: str
    overlap: str
    runs: Sequence[Run]
    details: dict[str, RunDetail] = field(default_factory=dict)
    """By workflow id: runs in flight (described) and failed runs whose history was read."""
    paused_note: str | None = None
    """Temporal's note when it holds the schedule paused now (None: not paused)."""
    listed_from: datetime | None = None
    """Runs that started before this were not listed: slots before it are not judged."""
    retained_from: datetime | None = None
    """Temporal keeps no closed run from before this (the namespace's retention)."""
    last_error: str | None = None
    """The heartbeat row's last live error."""
    lease_skip: dict[str, Any] | None = None
    """The heartbeat row's last lease skip (`logical_key`, `holder`)."""
    paused_since: datetime | None = None
    """When a pause Temporal holds now began, if known: the close of the failed run that made
    pause_on_failure pause the schedule."""
    fire_index: list[int] = field(init=False, repr=False)
    """The runs' fire times, for bisection (`runs` is sorted by fire time)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "fire_index", [r.fire_s for r in self.runs])


@dataclass(frozen=True)
class Verdict:
    cause: str
    text: str
    run: str | None = None
    """The run it names (K): the open run a skip was behind, or the slot's own run."""
    in_flight: bool = False
    """The slot's own run is open now: it may still commit, and a replay would only wait."""


@dataclass
class Group:
    """The slots of one cause: how many, the first and last, a few examples."""

    cause: str
    text: str
    """The first slot's own sentence."""
    in_flight: bool = False
    count: int = 0
    first_s: int = 0
    last_s: int = 0
    examples: list[int] = field(default_factory=list)

    def add(self, fire_s: int) -> None:
        if not self.count:
            self.first_s = fire_s
        self.count += 1
        self.last_s = max(self.last_s, fire_s)
        if len(self.examples) < EXAMPLES:
            self.examples.append(fire_s)


@dataclass
class Causes:
    """The window's slots without a commit, by cause."""

    schedule_id: str
    groups: list[Group]
    named: list[tuple[int, Verdict]]
    """The first `NAMED` slots, each with its own verdict."""
    paused_now: bool = False
    temporal: list[dict[str, Any]] = field(default_factory=list)
    """Temporal's own counts set beside the slots named with that cause (`temporal_counts`)."""

    def verdict_of(self, fire_time: datetime) -> Verdict | None:
        s = int(fire_time.timestamp())
        return next((v for t, v in self.named if t == s), None)

    def count(self, cause: str) -> int:
        return sum(g.count for g in self.groups if g.cause == cause)

    def as_json(self) -> list[dict[str, Any]]:
        return [
            {
                "cause": g.cause,
                "text": g.text,
                "count": g.count,
                "in_flight": g.in_flight,
                "first": slot_key(self.schedule_id, g.first_s),
                "last": slot_key(self.schedule_id, g.last_s),
                "example_keys": [slot_key(self.schedule_id, s) for s in g.examples],
                "next_command": next_command_for(self, g),
            }
            for g in self.groups
        ]

    def lines(self) -> list[str]:
        """One line per cause, then the command that closes its gap."""
        notes = [f"  {t['note']}" for t in self.temporal if t.get("note")]
        return causes_lines(self.as_json()) + notes


def causes_lines(causes: list[dict[str, Any]]) -> list[str]:
    """The text of a `causes` list (`Causes.as_json`): one line per cause, then the command
    that closes its gap. `backfill plan`, `audit` and `schedules describe` print these."""
    out: list[str] = []
    for c in causes:
        span = c["first"] if c["count"] == 1 else f"{c['first']} .. {c['last']}"
        out.append(f"  {c['count']} {c['cause']}: {c['text']} ({span})")
        if c["next_command"]:
            out.append(f"    next: {c['next_command']}")
    return out


def slot_key(schedule_id: str, fire_s: int) -> str:
    return logical_key(schedule_id, datetime.fromtimestamp(fire_s, UTC))


def next_command(
    schedule_id: str,
    first: datetime,
    last: datetime,
    *,
    paused: bool = False,
    held: bool = False,
) -> str:
    """The exact command that replays the fires from `first` to `last`: `--include-paused` only
    when the schedule is paused now (refused without it), `--include-held` only for fires an
    operator's pause held (skipped without it)."""
    flags = (" --include-paused" if paused else "") + (" --include-held" if held else "")
    return (
        f"cronwarden backfill run {schedule_id} --start {format_fire_time(first)} "
        f"--end {format_fire_time(last)}{flags}"
    )


def next_command_for(causes: Causes, group: Group) -> str | None:
    """What closes a group's gap; None for slots a replay must not take (still running, or
    judged committed elsewhere)."""
    if group.in_flight or group.cause in (OFF_GRID, COMMITTED, REPLAYED):
        return None
    return next_command(
        causes.schedule_id,
        datetime.fromtimestamp(group.first_s, UTC),
        datetime.fromtimestamp(group.last_s, UTC),
        paused=causes.paused_now,
        held=group.cause == PAUSED_OPERATOR,
    )


def judge(evidence: Evidence, fire_s: int) -> Verdict:
    """Why the slot at `fire_s` (epoch seconds, no commit) has none. Pure."""
    own = _own_runs(evidence, fire_s)
    if own:
        return _judge_run(evidence, own[-1])
    if evidence.listed_from is not None and fire_s < evidence.listed_from.timestamp():
        return Verdict(UNKNOWN, "not judged: more runs than one window lists; audit less at once")
    if evidence.paused_since is not None and fire_s >= evidence.paused_since.timestamp():
        # pause_on_failure paused it when its failed run closed: nothing was taken after.
        return Verdict(PAUSED_TEMPORAL, f"paused in Temporal: {evidence.paused_note}")
    blocker = _open_at(evidence, fire_s)
    if blocker is not None and evidence.overlap != "allow_all":
        key = slot_key(evidence.schedule_id, blocker.fire_s)
        return Verdict(
            SKIPPED_OVERLAP,
            f"skipped by Temporal's overlap policy ({evidence.overlap}) behind run {key}, "
            "still open at that time",
            run=key,
        )
    if evidence.paused_note is not None and _after_last_start(evidence, fire_s):
        return Verdict(PAUSED_TEMPORAL, f"paused in Temporal: {evidence.paused_note}")
    if evidence.retained_from is not None and fire_s < evidence.retained_from.timestamp():
        return Verdict(
            UNKNOWN, "no run on record: older than Temporal's retention, which forgot its runs"
        )
    return Verdict(
        MISSED_CATCHUP,
        "missed (Temporal was down or behind longer than the catchup window): no run started "
        "and none was open",
    )


def _judge_run(evidence: Evidence, run: Run) -> Verdict:
    detail = evidence.details.get(run.workflow_id)
    who = "replay" if run.replay else "run"
    if detail is not None:
        return Verdict(detail.cause, detail.text, run=run.workflow_id, in_flight=run.closed is None)
    if run.closed is None:
        return Verdict(
            RUNNING,
            f"{who} {run.workflow_id} running since {utc_text(run.started)}",
            run.workflow_id,
            in_flight=True,
        )
    if run.status == "completed":
        skip = evidence.lease_skip or {}
        if skip.get("logical_key") == slot_key(evidence.schedule_id, run.fire_s):
            holder = skip.get("holder") or "another run"
            return Verdict(
                SKIPPED_LEASE, f"skipped at the lease, held by {holder}", run.workflow_id
            )
        return Verdict(
            SKIPPED_LEASE,
            f"{who} {run.workflow_id} ended without committing (the lease was held)",
            run.workflow_id,
        )
    error = f" ({evidence.last_error})" if evidence.last_error and not run.replay else ""
    return Verdict(
        FAILED,
        f"{who} {run.workflow_id} {run.status.replace('_', ' ')}{error}",
        run.workflow_id,
    )


def _own_runs(evidence: Evidence, fire_s: int) -> list[Run]:
    # Runs are few next to slots in a long window, and sorted by fire time: bisect.
    runs = evidence.runs
    hi = bisect_right(evidence.fire_index, fire_s)
    found = []
    i = hi - 1
    while i >= 0 and runs[i].fire_s == fire_s:
        found.append(runs[i])
        i -= 1
    # A scheduled run speaks for its slot before a replay of it does.
    return sorted(found, key=lambda r: (not r.replay, r.started))


def _open_at(evidence: Evidence, fire_s: int) -> Run | None:
    """The scheduled run of an earlier slot still open at `fire_s` (replays hold the lease, not
    Temporal's overlap policy, so they never make Temporal skip)."""
    moment = datetime.fromtimestamp(fire_s, UTC)
    for run in reversed(evidence.runs[: bisect_right(evidence.fire_index, fire_s - 1)]):
        if run.replay or run.started > moment:
            continue
        if run.closed is None or run.closed > moment:
            return run
    return None


def _after_last_start(evidence: Evidence, fire_s: int) -> bool:
    starts = [r.started for r in evidence.runs if not r.replay]
    return not starts or datetime.fromtimestamp(fire_s, UTC) >= max(starts)


def summarise(
    evidence: Evidence,
    missing: Iterable[int],
    *,
    held: Iterable[int] = (),
    pauses: Sequence[Pause] = (),
    in_flight: Iterable[int] = (),
    paused_now: bool = False,
) -> Causes:
    """Every slot of `missing`, `in_flight` and `held` (epoch seconds) judged and grouped."""
    groups: dict[tuple[str, bool], Group] = {}
    named: list[tuple[int, Verdict]] = []

    def add(fire_s: int, verdict: Verdict) -> None:
        group = groups.get((verdict.cause, verdict.in_flight))
        if group is None:
            group = Group(verdict.cause, verdict.text, in_flight=verdict.in_flight)
            groups[(verdict.cause, verdict.in_flight)] = group
        group.add(fire_s)
        if len(named) < NAMED:
            named.append((fire_s, verdict))

    for s in in_flight:
        add(s, judge(evidence, s))
    for s in missing:
        add(s, judge(evidence, s))
    for s in held:
        add(s, _held_verdict(s, pauses))
    named.sort(key=lambda item: item[0])
    return Causes(
        evidence.schedule_id,
        sorted(groups.values(), key=lambda g: g.first_s),
        named,
        paused_now=paused_now,
    )


def _held_verdict(fire_s: int, pauses: Sequence[Pause]) -> Verdict:
    moment = datetime.fromtimestamp(fire_s, UTC)
    for p in pauses:
        if p.paused_at <= moment and (p.resumed_at is None or moment <= p.resumed_at):
            reason = f": {p.reason}" if p.reason else ""
            return Verdict(PAUSED_OPERATOR, f"paused by an operator{reason}")
    return Verdict(PAUSED_OPERATOR, "paused by an operator")


def temporal_counts(
    causes: Causes,
    description: ScheduleDescription | None,
    *,
    covers_life: bool,
) -> list[dict[str, Any]]:
    """Temporal's counters beside the slots named with the same cause. They count since the
    schedule's creation: only a window covering its whole life can be compared, and a trigger
    skipped behind a run counts there too, with no slot to name."""
    if description is None:
        return []
    out = []
    for cause, total in (
        (SKIPPED_OVERLAP, description.info.num_actions_skipped_overlap),
        (MISSED_CATCHUP, description.info.num_actions_missed_catchup_window),
    ):
        named = causes.count(cause)
        entry: dict[str, Any] = {"cause": cause, "temporal": total, "named": named}
        if not covers_life:
            entry["note"] = None
        elif named != total:
            entry["note"] = (
                f"Temporal counts {total} {cause} since the schedule's creation, {named} named "
                "here: "
                + (
                    "the rest were triggers or fires outside the window's due slots"
                    if total > named
                    else "Temporal's count is behind (it counts when it takes the fire) or a "
                    "slot's run was listed too late"
                )
            )
        else:
            entry["note"] = None
        entry["agree"] = covers_life and named == total
        out.append(entry)
    return out


def slot_json(schedule_id: str, fire_time: datetime, verdict: Verdict) -> dict[str, Any]:
    """One named slot, as `describe` and the status page show it."""
    return {
        "logical_key": logical_key(schedule_id, fire_time),
        "fire_time": utc_text_or_none(fire_time),
        "cause": verdict.cause,
        "text": verdict.text,
        "run": verdict.run,
    }
