"""The soak's fault plan: every fault and when it happens, computed up front from one seed.

The plan is pure data drawn from `random.Random(seed)` before anything starts, so the seed
printed with a failing run replays the same faults at the same offsets (the machine's timing
still differs: a replay reproduces the plan, not every interleaving).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    KILL = "kill"
    """SIGKILL a worker, start a new one after `seconds`."""
    STOP = "stop"
    """SIGSTOP a worker for `seconds` (past its lease TTL), then SIGCONT."""
    RESTART_TEMPORAL = "restart-temporal"
    """Stop the Temporal dev server for `seconds`, start it again on the same SQLite file."""
    RESTART_POSTGRES = "restart-postgres"
    """Stop Postgres for `seconds`, start it again on the same data directory."""
    BACKFILL = "backfill"
    """`backfill run` over a past window of `seconds` while the live fires go on."""
    PAUSE = "pause"
    """`schedules pause`, then `schedules unpause` after `seconds`."""


SERVER_KINDS = (Kind.RESTART_TEMPORAL, Kind.RESTART_POSTGRES)
# How often each kind is drawn once every kind has had its turn.
WEIGHTS = {
    Kind.KILL: 3,
    Kind.STOP: 3,
    Kind.RESTART_TEMPORAL: 1,
    Kind.RESTART_POSTGRES: 1,
    Kind.BACKFILL: 2,
    Kind.PAUSE: 2,
}
MEAN_GAP = 7.0
"""Seconds between two fault starts, on average."""
SERVER_SPACING = 4.0
"""A server restart starts at least this long after the previous one is back: two servers
down at once only measures a longer outage."""
BACKFILL_LAG = 3.0
"""A backfill's window ends this long before it starts: the newest fires are still the live
runs' own, and replaying them measures nothing."""
FIRST_AT = 3.0
"""The schedules get a few fires in before the first fault."""
LAST_START = 0.8
"""No fault starts in the last fifth of the run: most of them end before it does."""


@dataclass(frozen=True)
class Fault:
    at: float
    """Seconds after the soak's start."""
    kind: Kind
    target: str | None
    """A worker name, a schedule name, or None for a server."""
    seconds: float
    """How long the fault lasts (kill: until the new worker starts; backfill: the window)."""

    def describe(self) -> str:
        on = f" {self.target}" if self.target else ""
        what = {
            Kind.KILL: f"SIGKILL{on}, new worker after {self.seconds:.1f}s",
            Kind.STOP: f"SIGSTOP{on} for {self.seconds:.1f}s, then SIGCONT",
            Kind.RESTART_TEMPORAL: f"Temporal down for {self.seconds:.1f}s",
            Kind.RESTART_POSTGRES: f"Postgres down for {self.seconds:.1f}s",
            Kind.BACKFILL: f"backfill run{on} over a past {self.seconds:.0f}s window",
            Kind.PAUSE: f"pause{on} for {self.seconds:.1f}s",
        }[self.kind]
        return f"t+{self.at:6.1f}s  {self.kind:<16} {what}"


def make_plan(
    seed: int, duration: float, *, workers: list[str], schedules: list[str], lock_ttl: float
) -> list[Fault]:
    """Faults spread over `duration` seconds, every kind at least once.

    Every backfill comes after a pause of the schedule it replays has ended, so it has the
    paused fires to replay while that schedule's live fires go on: the seam where a replay can
    cost a live fire.
    """
    rng = random.Random(seed)
    kinds = list(Kind)
    extra = max(0, round(duration / MEAN_GAP) - len(kinds))
    kinds += rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()), k=extra)
    rng.shuffle(kinds)
    # The first backfill needs a pause before it.
    pause_at, backfill_at = kinds.index(Kind.PAUSE), kinds.index(Kind.BACKFILL)
    if backfill_at < pause_at:
        kinds[pause_at], kinds[backfill_at] = kinds[backfill_at], kinds[pause_at]

    # Start times uniform over the run, leaving its last stretch for the faults to end in.
    starts = sorted(rng.uniform(FIRST_AT, duration * LAST_START) for _ in kinds)
    server_free_at = 0.0
    pauses: dict[str, Fault] = {}
    first_backfill: Fault | None = None
    plan: list[Fault] = []
    for kind, at in zip(kinds, starts, strict=True):
        fault = _draw(
            rng, kind, round(at, 1), workers=workers, schedules=schedules, lock_ttl=lock_ttl
        )
        if kind in SERVER_KINDS:
            fault = _at(fault, max(fault.at, server_free_at))
            server_free_at = fault.at + fault.seconds + SERVER_SPACING
        elif kind is Kind.PAUSE:
            assert fault.target is not None
            pauses[fault.target] = fault
        elif kind is Kind.BACKFILL:
            if first_backfill is None:
                # The first one replays the last pause's schedule; later ones any schedule,
                # not before the first.
                fault = Fault(fault.at, kind, max(pauses.values(), key=lambda p: p.at).target, 0)
            else:
                fault = _at(fault, max(fault.at, first_backfill.at))
            fault = _after_pause(fault, pauses.get(fault.target or ""))
            first_backfill = first_backfill or fault
        plan.append(fault)
    return sorted(plan, key=lambda f: f.at)


def _draw(
    rng: random.Random,
    kind: Kind,
    at: float,
    *,
    workers: list[str],
    schedules: list[str],
    lock_ttl: float,
) -> Fault:
    if kind is Kind.KILL:
        return Fault(at, kind, rng.choice(workers), round(rng.uniform(0.5, 3.0), 1))
    if kind is Kind.STOP:
        # Past the lease TTL: another worker's retry may take the lease over and the stopped
        # one must be fenced when it wakes up.
        return Fault(at, kind, rng.choice(workers), round(lock_ttl + rng.uniform(1.0, 6.0), 1))
    if kind in SERVER_KINDS:
        return Fault(at, kind, None, round(rng.uniform(2.0, 6.0), 1))
    if kind is Kind.PAUSE:
        return Fault(at, kind, rng.choice(schedules), round(rng.uniform(4.0, 10.0), 1))
    return Fault(at, kind, rng.choice(schedules), round(rng.uniform(20.0, 60.0), 1))


def _after_pause(backfill: Fault, pause: Fault | None) -> Fault:
    """A backfill of a schedule paused before: it starts once the pause is over and its window
    covers the fires the pause left, from a little before the pause began."""
    if pause is None:
        return backfill
    start = max(backfill.at, pause.at + pause.seconds + BACKFILL_LAG + 2.0)
    window = max(backfill.seconds, start - pause.at + 3.0)
    return Fault(round(start, 1), backfill.kind, backfill.target, round(window, 1))


def _at(fault: Fault, at: float) -> Fault:
    return Fault(at, fault.kind, fault.target, fault.seconds)
