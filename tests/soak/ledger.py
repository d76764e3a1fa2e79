"""The soak's one table: per schedule, what was due, what committed, what `backfill plan`
lists, and the ways a fire can go wrong without anybody hearing of it.

The verdict is computed from the counts alone. It fails on:
- a fire due and neither committed nor listed by `backfill plan` (lost, and nobody would know);
- a duplicate effect (the probe table has no unique constraint: twice applied is two rows);
- an effect without an outbox record (written past the commit's fencing check);
- a live fire lost to a replay (it did not run because a `backfill run` held its lease);
- a key still missing after the closing `backfill run` (a loss even backfill cannot repair).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from tests.support.table import markdown_table

COLUMNS = (
    "schedule",
    "overlap",
    "fires due",
    "committed",
    "listed by plan",
    "unlisted",
    "duplicate effects",
    "effects w/o record",
    "live lost to replays",
    "left after backfill run",
    "verdict",
)


@dataclass
class ScheduleLedger:
    name: str
    overlap: str
    due: set[str]
    """Logical keys of Temporal's matching times from creation to the end, minus the fires
    that fell inside an operator pause."""
    committed: set[str]
    """Keys with an outbox record (any: live or replayed, due or not)."""
    listed: set[str]
    """Keys `backfill plan` lists over the same window."""
    duplicate_effects: int
    unrecorded_effects: int
    lost_to_replays: list[str]
    """Workflow ids of the live runs a replay cost."""
    left: set[str] | None = None
    """Keys `backfill plan` still lists after the closing `backfill run` (None: not run yet)."""
    notes: list[str] = field(default_factory=list)
    """What is worth knowing and does not fail the verdict (lease skips, failed runs)."""

    @property
    def unlisted(self) -> set[str]:
        return self.due - self.committed - self.listed

    @property
    def failures(self) -> list[str]:
        found = []
        if self.unlisted:
            found.append(f"{len(self.unlisted)} due, never committed and not listed")
        if self.duplicate_effects:
            found.append(f"{self.duplicate_effects} duplicate effects")
        if self.unrecorded_effects:
            found.append(f"{self.unrecorded_effects} effects without an outbox record")
        if self.lost_to_replays:
            found.append(f"{len(self.lost_to_replays)} live fires lost to replays")
        if self.left:
            found.append(f"{len(self.left)} keys left after backfill run")
        return found

    @property
    def verdict(self) -> str:
        return "FAIL" if self.failures else "pass"

    def cells(self) -> list[str]:
        counts = (
            len(self.due),
            len(self.due & self.committed),
            len(self.due & self.listed),
            len(self.unlisted),
            self.duplicate_effects,
            self.unrecorded_effects,
            len(self.lost_to_replays),
        )
        left = "-" if self.left is None else str(len(self.left))
        return [self.name, self.overlap, *(str(c) for c in counts), left, self.verdict]


def render(ledgers: list[ScheduleLedger]) -> str:
    total = ScheduleLedger(
        name="all",
        overlap="",
        due=set().union(*(s.due for s in ledgers)),
        committed=set().union(*(s.committed for s in ledgers)),
        listed=set().union(*(s.listed for s in ledgers)),
        duplicate_effects=sum(s.duplicate_effects for s in ledgers),
        unrecorded_effects=sum(s.unrecorded_effects for s in ledgers),
        lost_to_replays=[w for s in ledgers for w in s.lost_to_replays],
        left=None
        if any(s.left is None for s in ledgers)
        else set().union(*(s.left or set() for s in ledgers)),
    )
    rows = [s.cells() for s in [*ledgers, total]]
    return markdown_table(COLUMNS, rows, right=set(range(2, 10)))


def not_paused(times: list[datetime], pauses: list[tuple[datetime, datetime]]) -> list[datetime]:
    """Fire times outside every operator pause: a fire while paused was never due."""
    return [t for t in times if not any(start < t <= end for start, end in pauses)]
