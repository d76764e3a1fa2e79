"""A schedule's recent fire slots, each with what became of it: the status page's timeline.

Pure: the expected fire times come from Temporal's own evaluation of the spec, the records from
the outbox, the running fires from Temporal's running actions and the lease table; nothing here
touches a server or the clock, so every rule is unit-tested with plain values.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final

from cronwarden.activities.contract import logical_key

COMMITTED: Final = "committed"
"""Committed by the schedule's own run."""
REPLAYED: Final = "replayed"
"""Committed by a `backfill run` replay."""
RUNNING: Final = "running"
"""A run of this fire time is in flight (started in Temporal, or holding the lease)."""
SKIPPED: Final = "skipped"
"""The live fire found the lease held and ended `overlap-locked`."""
DUE: Final = "due"
"""Fired moments ago, or held in the schedule's buffer behind a running fire (buffer_one):
not yet running, not missing."""
MISSING: Final = "missing"
"""Expected, past its settling time, and neither committed, running nor skipped: `backfill plan`
lists it (or Temporal skipped it under the overlap policy, which it counts but does not name)."""
OFF_GRID: Final = "off-grid"
"""Committed at a time the current spec does not produce: a manual trigger, or a spec changed
since."""
STATES: Final = (COMMITTED, REPLAYED, RUNNING, SKIPPED, DUE, MISSING, OFF_GRID)


@dataclass(frozen=True)
class Record:
    """What the outbox says about one committed key."""

    fire_time: datetime
    committed_at: datetime
    worker: str
    attempt: int
    workflow_id: str | None
    run_id: str | None
    replay: bool


@dataclass(frozen=True)
class Slot:
    fire_time: datetime
    logical_key: str
    state: str
    """One of STATES."""
    record: Record | None = None
    note: str | None = None


@dataclass(frozen=True)
class LeaseSkip:
    """The schedule's last live fire skipped at the lease (the heartbeat row keeps the last)."""

    logical_key: str
    holder: str | None


def slots(
    schedule_id: str,
    *,
    expected: Sequence[datetime] | None,
    records: Sequence[Record],
    running: Collection[datetime],
    lease_skip: LeaseSkip | None,
    now: datetime,
    settle: timedelta,
    limit: int,
    buffered: int = 0,
) -> list[Slot]:
    """The last `limit` slots up to `now`, oldest first.

    `expected`: Temporal's fire times of the current spec, ascending (None: Temporal could not be
    asked, so only what the outbox and the leases show is listed, and nothing can be called
    missing). A record off the expected grid is shown where it falls, but only inside the span
    the expected times cover, so an old manual trigger does not crowd out the recent grid.
    `buffered`: starts Temporal holds in the schedule's buffer; they are the first fires after
    the oldest running one that have nothing else to show.
    """
    by_time = {r.fire_time: r for r in records}
    found: list[Slot] = []
    if expected is None:
        times = sorted(set(by_time) | {t for t in running if t <= now})[-limit:]
        found = [_slot(schedule_id, t, by_time.get(t), t in running) for t in times]
        return found
    grid = [t for t in expected if t <= now][-limit:]
    on_grid = set(grid)
    for t in grid:
        record = by_time.get(t)
        key = logical_key(schedule_id, t)
        if record is not None or t in running:
            found.append(_slot(schedule_id, t, record, t in running))
        elif lease_skip is not None and lease_skip.logical_key == key:
            holder = f" (held by {lease_skip.holder})" if lease_skip.holder else ""
            found.append(Slot(t, key, SKIPPED, note=f"the lease was held{holder}"))
        elif t + settle > now:
            found.append(Slot(t, key, DUE))
        else:
            found.append(Slot(t, key, MISSING))
    start = grid[0] if grid else None
    for t, record in by_time.items():
        if t not in on_grid and t <= now and (start is None or t >= start):
            found.append(
                Slot(t, logical_key(schedule_id, t), OFF_GRID, record=record, note=_by(record))
            )
    found.sort(key=lambda s: s.fire_time)
    return _buffered(found, buffered)[-limit:]


def _buffered(found: list[Slot], buffered: int) -> list[Slot]:
    first_running = next((i for i, s in enumerate(found) if s.state == RUNNING), None)
    if not buffered or first_running is None:
        return found
    out = list(found)
    for i in range(first_running + 1, len(out)):
        if buffered and out[i].state in (MISSING, DUE):
            out[i] = replace(out[i], state=DUE, note="buffered behind the running fire")
            buffered -= 1
    return out


def _slot(schedule_id: str, t: datetime, record: Record | None, running: bool) -> Slot:
    key = logical_key(schedule_id, t)
    if record is None:
        return Slot(t, key, RUNNING if running else MISSING)
    return Slot(t, key, REPLAYED if record.replay else COMMITTED, record=record)


def _by(record: Record) -> str:
    return "committed by a replay" if record.replay else "not on the current spec's grid"


def settle_time(grace: timedelta) -> timedelta:
    """How long after its fire time a slot with nothing to show is `due` rather than `missing`:
    the time Temporal takes to start a run and a worker to take its lease, never longer than the
    grace the monitor allows before it pages."""
    return min(grace, timedelta(minutes=1))
