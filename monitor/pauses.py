"""Pause truth: a pause recorded by `schedules pause` counts only while Temporal holds it too
(paused, with the note `schedules pause` wrote: pause_on_failure replaces that note, and its
pause must page).

Temporal's UI and CLI can unpause a schedule without cronwarden knowing; its heartbeat row would
then keep the monitor silent about a schedule Temporal runs. Each pass therefore looks up, in
Temporal, every schedule whose row says paused (few, and found by an index) and lifts the row's
pause when Temporal no longer holds it. Temporal is asked, never relied on: when it does not
answer in time the pass goes on with the rows as they are, so the monitor keeps paging from
Postgres alone. (A schedule Temporal cannot reach runs nowhere, so its recorded pause silences
nothing that runs.)
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from temporalio.client import Client, ScheduleDescription
from temporalio.service import RPCError

from cronwarden.logs import get_logger
from cronwarden.schedules.bounded import map_bounded
from cronwarden.schedules.health import held_by_operator
from cronwarden.schedules.inventory import DESCRIBE_CONCURRENCY, describe_or_none
from cronwarden.store import heartbeats

log = get_logger("cronwarden.monitor")

TemporalConnect = Callable[[], Awaitable[Client]]


@dataclass(frozen=True)
class Lift:
    """A recorded pause Temporal no longer holds, to lift with `heartbeats.lift_stale_pause`."""

    schedule_id: str
    seen_updated_at: datetime
    next_expected_at: datetime | None
    ran_again_at: datetime | None = None
    """When Temporal took its first action since the row was paused, if it did: it had let go
    of the pause by then, so the recorded pause ends there at the latest, not when this pass
    noticed (fires between were run, or missed, not held)."""


@dataclass(frozen=True)
class PauseCheckPolicy:
    timeout: float = 5.0
    """Longest a pass waits for Temporal (connecting, or describing the paused schedules)."""
    reconnect_every: float = 30.0
    """After a failed connect, how long passes go on without asking Temporal."""
    batch: int = 100
    """At most this many paused schedules looked up per pass; more are taken in turn over the
    next passes, so a pass stays cheap however many schedules are paused."""
    warn_every: float = 600.0
    """While recorded pauses cannot be checked against Temporal, a warning this often: a pause
    lifted in Temporal's UI meanwhile keeps its schedule silent, and one line at the transition
    is easy to miss."""


class PauseCheck:
    """Finds the recorded pauses that Temporal no longer holds (see the module docstring)."""

    def __init__(
        self,
        connect: TemporalConnect,
        policy: PauseCheckPolicy | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._connect = connect
        self.policy = policy or PauseCheckPolicy()
        # Its back-off and warning intervals are measured on this clock: a monotonic one, so a
        # wall clock stepped back cannot keep Temporal unasked (or the warning unsaid) for
        # as long as it stepped, nor one stepped forward end either early.
        self._clock = clock
        self._client: Client | None = None
        self._next_connect = 0.0
        # One connect at a time: a pass and page loads that ask together share its outcome
        # instead of each opening (and leaking) a client of its own.
        self._connecting = asyncio.Lock()
        self._reachable = True
        self._after = ""
        """The last schedule id looked up: the next pass goes on from there."""
        self.reachable = True
        """Temporal answered the last lookup (or had nothing to be asked)."""
        self.unverified: list[str] = []
        """Recorded pauses of the last pass that could not be checked against Temporal."""
        self._warned_at: float | None = None

    async def client_or_none(self) -> Client | None:
        """The Temporal client, connected on first use; None while Temporal is unreachable
        (after a failed connect, no new try for `reconnect_every`). The status page shares it."""
        async with self._connecting:
            if self._client is not None:
                return self._client
            if self._clock() < self._next_connect:
                return None
            # Set before trying: a caller cancelled mid-connect (a page's own deadline) still
            # leaves the back-off in place, so nobody waits on a black-holed Temporal again at once.
            self._next_connect = self._clock() + self.policy.reconnect_every
            try:
                async with asyncio.timeout(self.policy.timeout):
                    self._client = await self._connect()
            except Exception as exc:
                self._unreachable(exc)
                return None
            self._next_connect = 0.0
            return self._client

    def _unreachable(self, exc: BaseException) -> None:
        if self._reachable:
            log.warning(
                "monitor.temporal-unreachable",
                error=type(exc).__name__,
                note="recorded pauses are trusted until Temporal answers again",
            )
        self._reachable = False
        self.reachable = False

    def share(self, rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """This pass's share of `rows`: the next `batch` by schedule id, wrapping around."""
        ordered = sorted(rows, key=lambda r: str(r["schedule_id"]))
        start = bisect.bisect_right([str(r["schedule_id"]) for r in ordered], self._after)
        turn = (ordered[start:] + ordered[:start])[: self.policy.batch]
        self._after = str(turn[-1]["schedule_id"]) if len(ordered) > len(turn) else ""
        return turn

    async def lifts(self, rows: Sequence[Mapping[str, Any]]) -> list[Lift]:
        """Of `rows` (marked paused), those Temporal runs unpaused, with their new deadline.
        Empty when Temporal does not answer in time."""
        lifts = await self._lifts(rows)
        self._warn_unverified()
        return lifts

    def _warn_unverified(self) -> None:
        if not self.unverified:
            self._warned_at = None
            return
        now = self._clock()
        if self._warned_at is not None and now - self._warned_at < self.policy.warn_every:
            return
        self._warned_at = now
        log.warning(
            "monitor.pauses-unverified",
            schedule_ids=self.unverified,
            count=len(self.unverified),
            note="recorded as paused but not checked against Temporal: a pause lifted there "
            "stays silent until Temporal answers",
        )

    async def _lifts(self, rows: Sequence[Mapping[str, Any]]) -> list[Lift]:
        self.unverified = []
        if not rows:
            return []
        client = await self.client_or_none()
        if client is None:
            self.unverified = sorted(str(r["schedule_id"]) for r in rows)
            return []
        rows = self.share(rows)
        try:
            async with asyncio.timeout(self.policy.timeout):
                found = await map_bounded(
                    lambda r: _describe_one(client, str(r["schedule_id"])),
                    rows,
                    limit=DESCRIBE_CONCURRENCY,
                )
        except Exception as exc:
            self._unreachable(exc)
            self.unverified = sorted(str(r["schedule_id"]) for r in rows)
            return []
        if not self._reachable:
            log.info("monitor.temporal-reachable")
            self._reachable = True
        self.reachable = True
        lifts = []
        for row, desc in zip(rows, found, strict=True):
            if desc is _UNVERIFIED:
                self.unverified.append(str(row["schedule_id"]))
                continue
            assert not isinstance(desc, _Unverified)
            # Gone from Temporal: nothing runs it, so the pause silences nothing (and `apply`
            # re-creating it clears the pause).
            if desc is None:
                continue
            state = desc.schedule.state
            if state.paused and held_by_operator(state.note):
                continue
            if state.paused:
                # Paused again by something else (pause_on_failure): that pause pages, judged
                # by the deadline the row holds.
                deadline = row["next_expected_at"]
            else:
                times = desc.info.next_action_times
                deadline = heartbeats.lifted_deadline(
                    row["next_expected_at"], times[0] if times else None
                )
            since = row["updated_at"]
            taken = [a.started_at for a in desc.info.recent_actions if a.started_at > since]
            lifts.append(
                Lift(
                    schedule_id=row["schedule_id"],
                    seen_updated_at=since,
                    next_expected_at=deadline,
                    ran_again_at=min(taken) if taken else None,
                )
            )
        return lifts


class _Unverified:
    """A schedule whose lookup failed on its own (not NOT_FOUND): its pause stays as recorded."""


_UNVERIFIED = _Unverified()


async def _describe_one(
    client: Client, schedule_id: str
) -> ScheduleDescription | _Unverified | None:
    # One schedule's error (a bad id, a permission on one namespace object) must not leave
    # every other recorded pause of the batch unchecked.
    try:
        return await describe_or_none(client, schedule_id)
    except RPCError as exc:
        log.warning("monitor.pause-lookup-failed", schedule_id=schedule_id, error=exc.status.name)
        return _UNVERIFIED
