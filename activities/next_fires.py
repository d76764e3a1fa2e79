"""The worker's cache of Temporal's next action times, per schedule, keyed by definition digest.

The heartbeat's next expected fire comes from Temporal (we never evaluate specs). Asking for it
on every run cost one DescribeSchedule per run, made while the job's transaction and its row
locks were open; and a failed look-up left the row at this fire's own time, which pages at
fire + grace although the schedule runs fine. A describe returns several next action times:
this cache keeps them, the run's commit statement picks the first one after Postgres' now()
(never this worker's clock), and the cache asks Temporal again only when the commit reports
the times ran out or were not for the row's definition, or a run names another definition.

A look-up never happens inside a transaction: the run starts it when it starts, and waits for
it before it opens one (`ctx.transaction()`, or the commit when the job opened none).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio.client import Client, ScheduleActionStartWorkflow, ScheduleDescription
from temporalio.service import RPCError, RPCStatusCode

from activities.contract import DIGEST_MEMO
from cronwarden.logs import get_logger

log = get_logger("cronwarden.run")


@dataclass(frozen=True)
class NextFires:
    """What one describe said about a schedule."""

    digest: str | None
    """The definition digest in the described schedule's action memo (None: none readable)."""
    times: tuple[datetime, ...] = ()
    """Temporal's next action times, as of the describe."""
    exists: bool = True
    """False: Temporal has no such schedule (a run of a deleted one writes no heartbeat)."""


UNKNOWN = NextFires(digest=None)


def refresh_due(
    times: tuple[datetime, ...], fires_ahead: int, *, accepted: bool, grace: timedelta
) -> bool:
    """Whether the next run must look the schedule up again, after a commit that saw
    `fires_ahead` of the cached `times` after its now() (the first of them it took).

    Normally when the one it took was the last: one describe per batch of times. But when the
    fires are further apart than the grace, a look-up failing right then would leave the row
    at this fire's own time and page before the next fire could fix it: such a schedule looks
    up one fire earlier, so a failed look-up still finds a valid cached time.
    """
    if not accepted:
        return True
    spare = 2 if len(times) >= 2 and times[-1] - times[-2] > grace else 1
    return fires_ahead <= spare


class NextFireCache:
    """One per worker process; shared by its concurrent runs."""

    def __init__(self, client: Client | None, *, timeout: timedelta) -> None:
        self._client = client
        self._timeout = timeout.total_seconds()
        self._entries: dict[str, NextFires] = {}
        # Schedules whose times ran out, were refused by the row, or could not be looked up.
        self._stale: set[str] = set()
        self._looking: dict[str, asyncio.Task[None]] = {}

    def get(self, schedule_id: str) -> NextFires:
        """The times known now (possibly stale: the commit only takes those still ahead)."""
        return self._entries.get(schedule_id, UNKNOWN)

    def refresh_if_needed(self, schedule_id: str, digest: str) -> None:
        """Start describing the schedule unless fresh times of this definition are cached.

        `digest` is the run's definition digest; empty for a run started without one (an
        input from before runs carried it), which then takes whatever definition is cached.
        """
        if self._client is None or schedule_id in self._looking:
            return
        entry = self._entries.get(schedule_id)
        if (
            entry is not None
            and schedule_id not in self._stale
            and (not digest or entry.digest == digest)
        ):
            return
        task = asyncio.create_task(self._look_up(schedule_id), name=f"describe:{schedule_id}")
        self._looking[schedule_id] = task
        task.add_done_callback(lambda _: self._looking.pop(schedule_id, None))

    async def settled(self, schedule_id: str) -> None:
        """Wait for a look-up of this schedule in flight, if any. Never raises its outcome, and
        never cancels it: other runs of the schedule may be waiting for it too."""
        task = self._looking.get(schedule_id)
        if task is not None:
            await asyncio.wait([task])

    def used(self, schedule_id: str, *, fires_ahead: int, accepted: bool, grace: timedelta) -> None:
        """A commit took (or refused) the cached times: refresh before they run out."""
        if refresh_due(self.get(schedule_id).times, fires_ahead, accepted=accepted, grace=grace):
            self._stale.add(schedule_id)

    async def _look_up(self, schedule_id: str) -> None:
        assert self._client is not None
        try:
            desc = await asyncio.wait_for(
                self._client.get_schedule_handle(schedule_id).describe(
                    rpc_timeout=timedelta(seconds=self._timeout)
                ),
                self._timeout,
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                # Deleted (its heartbeat row is gone on purpose); looked up again next run, in
                # case a schedule of that id is created again.
                self._entries[schedule_id] = NextFires(digest=None, exists=False)
                return
            self._failed(schedule_id, f"{exc.status.name}: {exc.message}")
            return
        except TimeoutError:
            self._failed(schedule_id, f"no answer within {self._timeout:g}s")
            return
        self._entries[schedule_id] = NextFires(
            digest=await self._digest(desc), times=tuple(desc.info.next_action_times)
        )
        self._stale.discard(schedule_id)

    def _failed(self, schedule_id: str, error: str) -> None:
        # The times already cached stay: those still ahead of the commit's now() are as valid
        # as before. No time at all leaves the row's next expected fire as it is.
        self._stale.add(schedule_id)
        log.warning("run.next-fires-unknown", schedule_id=schedule_id, error=error)

    async def _digest(self, desc: ScheduleDescription) -> str | None:
        action = desc.schedule.action
        if not isinstance(action, ScheduleActionStartWorkflow) or not action.memo:
            return None
        if DIGEST_MEMO not in action.memo:
            return None
        assert self._client is not None
        try:
            value = (await self._client.data_converter.decode([action.memo[DIGEST_MEMO]]))[0]
        except Exception:  # a memo this worker cannot decode (another payload codec)
            return None
        return value if isinstance(value, str) else None
