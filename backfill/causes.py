"""Why a slot has no commit: one judgement per missing, running or held fire time, made here
and shown by `backfill plan`, `audit`, `schedules describe`, `status` and the status page.

The judgement (`judge`) is a pure function of the evidence `backfill/evidence.py` gathers once
per window (the schedule's runs with their start and close times, what the runs in flight wait
on, why failed runs failed), so every rule is tested with plain values. A year of missing slots
is judged as integers in one pass and summarised by cause (a count, the first and last, a few
example keys, the command that closes the gap); only `NAMED` slots are kept one by one.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
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
    _starts: list[float] = field(init=False, repr=False)
    _reach: list[tuple[float, Run]] = field(init=False, repr=False)
    _last_start: float | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Indexes built once, so a slot is judged by two bisections whatever the runs' number.
        set_ = object.__setattr__
        set_(self, "fire_index", [r.fire_s for r in self.runs])
        scheduled = sorted((r for r in self.runs if not r.replay), key=lambda r: r.started)
        set_(self, "_starts", [r.started.timestamp() for r in scheduled])
        # The run open longest among those started by each point: the one a slot waits behind.
        reach: list[tuple[float, Run]] = []
        for r in scheduled:
            close = math.inf if r.closed is None else r.closed.timestamp()
            reach.append((close, r) if not reach or close > reach[-1][0] else reach[-1])
        set_(self, "_reach", reach)
        set_(self, "_last_start", self._starts[-1] if scheduled else None)

    def own_run(self, fire_s: int) -> Run | None:
        """The slot's own run: its scheduled run before a replay of it, the latest of each."""
        lo = bisect_left(self.fire_index, fire_s)
        hi = bisect_right(self.fire_index, fire_s, lo)
        if lo == hi:
            return None
        return max(self.runs[lo:hi], key=lambda r: (not r.replay, r.started))

    def open_at(self, fire_s: int) -> Run | None:
        """The scheduled run still open at `fire_s` that started before it (replays hold the
        lease, not Temporal's overlap policy, so they never make Temporal skip)."""
        i = bisect_right(self._starts, fire_s) - 1
        if i < 0:
            return None
        close, run = self._reach[i]
        return run if close > fire_s else None

    def after_last_start(self, fire_s: int) -> bool:
        return self._last_start is None or fire_s >= self._last_start


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


def classify(evidence: Evidence, fire_s: int) -> tuple[str, Run | None, bool]:
    """The slot's cause, the run it names and whether that run is its own and open: cheap
    enough for every slot of a year (two bisections, no text). Pure."""
    own = evidence.own_run(fire_s)
    if own is not None:
        return _run_cause(evidence, own), own, own.closed is None
    if evidence.listed_from is not None and fire_s < evidence.listed_from.timestamp():
        return UNKNOWN, None, False
    if evidence.paused_since is not None and fire_s >= evidence.paused_since.timestamp():
        # pause_on_failure paused it when its failed run closed: nothing was taken after.
        return PAUSED_TEMPORAL, None, False
    blocker = evidence.open_at(fire_s)
    if blocker is not None and evidence.overlap != "allow_all":
        return SKIPPED_OVERLAP, blocker, False
    if evidence.paused_note is not None and evidence.after_last_start(fire_s):
        return PAUSED_TEMPORAL, None, False
    if evidence.retained_from is not None and fire_s < evidence.retained_from.timestamp():
        return UNKNOWN, None, False
    return MISSED_CATCHUP, None, False


def _run_cause(evidence: Evidence, run: Run) -> str:
    detail = evidence.details.get(run.workflow_id)
    if detail is not None:
        return detail.cause
    if run.closed is None:
        return RUNNING
    return SKIPPED_LEASE if run.status == "completed" else FAILED


def judge(evidence: Evidence, fire_s: int) -> Verdict:
    """Why the slot at `fire_s` (epoch seconds, no commit) has none, in a sentence. Pure."""
    cause, run, _ = classify(evidence, fire_s)
    if run is not None and run.fire_s == fire_s:
        return _run_verdict(evidence, run, cause)
    if cause == SKIPPED_OVERLAP and run is not None:
        key = slot_key(evidence.schedule_id, run.fire_s)
        return Verdict(
            SKIPPED_OVERLAP,
            f"skipped by Temporal's overlap policy ({evidence.overlap}) behind run {key}, "
            "still open at that time",
            run=key,
        )
    if cause == PAUSED_TEMPORAL:
        return Verdict(PAUSED_TEMPORAL, f"paused in Temporal: {evidence.paused_note}")
    if cause == UNKNOWN:
        cut = evidence.listed_from is not None and fire_s < evidence.listed_from.timestamp()
        return Verdict(
            UNKNOWN,
            "not judged: more runs than one window lists; audit a shorter window"
            if cut
            else "no run on record: older than Temporal's retention, which forgot its runs",
        )
    return Verdict(
        MISSED_CATCHUP,
        "missed (Temporal was down or behind longer than the catchup window): no run started "
        "and none was open",
    )


def _run_verdict(evidence: Evidence, run: Run, cause: str) -> Verdict:
    detail = evidence.details.get(run.workflow_id)
    who = "replay" if run.replay else "run"
    in_flight = run.closed is None
    if detail is not None:
        return Verdict(cause, detail.text, run=run.workflow_id, in_flight=in_flight)
    if in_flight:
        text = f"{who} {run.workflow_id} running since {utc_text(run.started)}"
        return Verdict(RUNNING, text, run.workflow_id, in_flight=True)
    if cause == SKIPPED_LEASE:
        skip = evidence.lease_skip or {}
        if skip.get("logical_key") == slot_key(evidence.schedule_id, run.fire_s):
            text = f"skipped at the lease, held by {skip.get('holder') or 'another run'}"
        else:
            text = f"{who} {run.workflow_id} ended without committing (the lease was held)"
        return Verdict(SKIPPED_LEASE, text, run.workflow_id)
    error = f" ({evidence.last_error})" if evidence.last_error and not run.replay else ""
    return Verdict(
        FAILED, f"{who} {run.workflow_id} {run.status.replace('_', ' ')}{error}", run.workflow_id
    )


def summarise(
    evidence: Evidence,
    missing: Iterable[int],
    *,
    held: Iterable[int] = (),
    pauses: Sequence[Pause] = (),
    in_flight: Iterable[int] = (),
    paused_now: bool = False,
) -> Causes:
    """Every slot of `missing`, `in_flight` and `held` (epoch seconds) judged and grouped: a
    sentence is written only for a group's first slot and the first `NAMED` slots."""
    groups: dict[tuple[str, bool], Group] = {}
    named: list[tuple[int, Verdict]] = []

    def add(fire_s: int, key: tuple[str, bool], verdict: Callable[[], Verdict]) -> None:
        group = groups.get(key)
        if group is None or len(named) < NAMED:
            found = verdict()
            if group is None:
                group = groups[key] = Group(found.cause, found.text, in_flight=key[1])
            if len(named) < NAMED:
                named.append((fire_s, found))
        group.add(fire_s)

    for s in in_flight:
        cause, own, open_ = classify(evidence, s)
        if own is None or own.fire_s != s:
            # Temporal says it runs, visibility does not list it yet (it lags a start).
            add(s, (RUNNING, True), partial(_starting, evidence, s))
        else:
            add(s, (cause, open_), partial(judge, evidence, s))
    for s in missing:
        cause, _, open_ = classify(evidence, s)
        add(s, (cause, open_), partial(judge, evidence, s))
    for s in held:
        add(s, (PAUSED_OPERATOR, False), partial(_held_verdict, s, pauses))
    named.sort(key=lambda item: item[0])
    return Causes(
        evidence.schedule_id,
        sorted(groups.values(), key=lambda g: g.first_s),
        named,
        paused_now=paused_now,
    )


def _starting(evidence: Evidence, fire_s: int) -> Verdict:
    key = slot_key(evidence.schedule_id, fire_s)
    return Verdict(RUNNING, f"run of {key} starting (not listed yet)", in_flight=True)


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
