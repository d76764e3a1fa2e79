"""Which schedules `schedules pause|unpause` act on: one id, or a selector (`--job X`, `--label
team=billing`, `--all`) over the schedules `apply` recorded.

A selector is read before anything is asked of Temporal or Postgres, and resolved in full
before the first schedule is touched: a selector that cannot be read, or that matches nothing,
is one error and changes nothing. Matching reads the latest recorded definitions (Postgres,
consistent: Temporal's schedule list may miss a schedule created a moment ago), then describes
each match in Temporal, so a schedule deleted outside cronwarden is left out rather than failing
the command half way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
from temporalio.client import Client

from cronwarden.errors import InvalidInput
from cronwarden.schedules.inventory import describe_many, is_managed
from cronwarden.schedules.selectors import LabelSelector, parse_selector
from cronwarden.store import definitions, heartbeats


@dataclass(frozen=True)
class Selection:
    """Exactly one of: an id, a job, a label selector, or every schedule."""

    schedule_id: str | None = None
    job: str | None = None
    labels: LabelSelector | None = None
    every: bool = False

    @property
    def by_selector(self) -> bool:
        return self.schedule_id is None

    def __str__(self) -> str:
        if self.job is not None:
            return f"--job {self.job}"
        if self.labels is not None:
            return f"--label {self.labels}"
        return "--all" if self.every else str(self.schedule_id)

    def matches(self, definition: dict[str, object]) -> bool:
        if self.every:
            return True
        if self.job is not None:
            return definition.get("job") == self.job
        return self.labels is not None and self.labels.matches_definition(definition)


def selection(
    schedule_id: str | None,
    *,
    job: str | None,
    labels: Sequence[str] | None,
    every: bool,
    reason: str | None,
    command: str,
) -> Selection:
    """The selection the flags ask for; InvalidInput, before anything is asked, for none or
    several of ID/--job/--label/--all, a label selector that cannot be read, or (`pause`) a
    selector without `--reason`."""
    given = [
        name
        for name, value in (
            ("ID", schedule_id),
            ("--job", job),
            ("--label", labels or None),
            ("--all", every or None),
        )
        if value is not None
    ]
    if len(given) != 1:
        said = " and ".join(given) if given else "none"
        raise InvalidInput(f"{command} takes one of ID, --job, --label or --all (given: {said})")
    if job is not None and not job.strip():
        raise InvalidInput("--job is empty: give the name of a job")
    chosen = Selection(
        schedule_id=schedule_id,
        job=job.strip() if job is not None else None,
        labels=parse_selector(labels) if labels else None,
        every=every,
    )
    if chosen.by_selector and command == "pause" and not reason:
        raise InvalidInput(
            f"pause {chosen} needs --reason: every schedule it pauses records it, and the "
            "operator who finds them paused reads it"
        )
    return chosen


async def targets(
    client: Client, pool: asyncpg.Pool, chosen: Selection, *, paused_only: bool = False
) -> list[str]:
    """The ids (sorted) to act on: the id given, or those a selector picks among the managed
    schedules Temporal holds; `paused_only` (unpause): of those, the ones paused in Temporal
    or on their heartbeat row. InvalidInput when a selector picks none."""
    if chosen.schedule_id is not None:
        return [chosen.schedule_id]
    async with pool.acquire() as conn:
        recorded = await definitions.latest_all(conn)
        rows = await heartbeats.all_rows(conn) if paused_only else {}
    candidates = sorted(sid for sid, d in recorded.items() if chosen.matches(d))
    found = []
    for sid, desc in zip(candidates, await describe_many(client, candidates), strict=True):
        if desc is None or not await is_managed(desc):
            continue  # deleted outside cronwarden, or no longer ours
        row_paused = bool(rows.get(sid, {}).get("paused"))
        if paused_only and not (desc.schedule.state.paused or row_paused):
            continue
        found.append(sid)
    if not found:
        which = "paused schedule" if paused_only else "schedule"
        raise InvalidInput(f"{chosen} matches no {which}: nothing changed")
    return found
