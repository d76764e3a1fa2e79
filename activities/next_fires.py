"""The worker's cache of Temporal's next action times, per schedule, keyed by definition digest.

The heartbeat's next expected fire comes from Temporal (we never evaluate specs). Asking for it
on every run cost one DescribeSchedule per run, made while the job's transaction and its row
locks were open; and a failed look-up left the row at this fire's own time, which pages at
fire + grace although the schedule runs fine. A describe returns several next action times:
this cache keeps them, the run's commit statement picks the first one after the database's
clock at that statement (never this worker's clock), and the cache asks Temporal again when the
commit reports the times ran out or were not for the row's definition, when a run names another
definition, or when a run starts with the cached times running out: other workers may have run
the schedule's fires meanwhile (replicas share them, a pause, Temporal's skips), so the times
this worker cached can all have passed without it committing once.

A look-up never happens inside a transaction: the run starts it when it starts, and waits for
it before it opens one (`ctx.transaction()`, or the commit when the job opened none).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio.client import Client, ScheduleActionStartWorkflow, ScheduleDescription
from temporalio.service import RPCError, RPCStatusCode

from cronwarden.activities.contract import DIGEST_MEMO
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


def ahead_of(times: tuple[datetime, ...], reference: datetime) -> int:
    return sum(1 for t in times if t > reference)


class NextFireCache:
    """One per worker process; shared by its concurrent runs."""

    def __init__(
        self,
        client: Client | None,
        *,
        timeout: timedelta,
        on_describe: Callable[[], None] | None = None,
    ) -> None:
        """`on_describe`: told of every describe call (the worker counts them)."""
        self._client = client
        self._on_describe = on_describe
        self._timeout = timeout.total_seconds()
        self._entries: dict[str, NextFires] = {}
        # Schedules whose times ran out, were refused by the row, or could not be looked up.
        self._stale: set[str] = set()
        self._looking: dict[str, asyncio.Task[None]] = {}
        # The database's clock minus this worker's, as seen at the last commit: the worker's
        # clock may be skewed, and the commit picks times by the database's.
        self._clock_offset: timedelta | None = None

    def get(self, schedule_id: str) -> NextFires:
        """The times known now (possibly stale: the commit only takes those still ahead)."""
        return self._entries.get(schedule_id, UNKNOWN)

    def refresh_if_needed(
        self, schedule_id: str, digest: str, *, fire_time: datetime, grace: timedelta
    ) -> None:
        """Start describing the schedule unless fresh times of this definition are cached.

        `digest` is the run's definition digest; empty for a run started without one (an
        input from before runs carried it), which then takes whatever definition is cached.
        `fire_time` is the run's nominal fire time: the next fire comes after it, whatever any
        clock says.
        """
        if self._client is None or schedule_id in self._looking:
            return
        entry = self._entries.get(schedule_id)
        reference = self._reference(fire_time)
        if (
            entry is not None
            and schedule_id not in self._stale
            and (not digest or entry.digest == digest)
            # Times that passed while other workers ran the fires are never marked stale by a
            # commit here: count what is still ahead, as the commit will.
            and not refresh_due(
                entry.times, ahead_of(entry.times, reference), accepted=True, grace=grace
            )
        ):
            return
        task = asyncio.create_task(
            self._look_up(schedule_id, reference), name=f"describe:{schedule_id}"
        )
        self._looking[schedule_id] = task
        task.add_done_callback(lambda _: self._looking.pop(schedule_id, None))

    async def settled(self, schedule_id: str) -> None:
        """Wait for a look-up of this schedule in flight, if any. Never raises its outcome, and
        never cancels it: other runs of the schedule may be waiting for it too."""
        task = self._looking.get(schedule_id)
        if task is not None:
            await asyncio.wait([task])

    def used(
        self,
        schedule_id: str,
        *,
        fires_ahead: int,
        accepted: bool,
        grace: timedelta,
        database_now: datetime | None = None,
    ) -> None:
        """A commit took (or refused) the cached times: refresh before they run out.
        `database_now` is the commit statement's clock."""
        if database_now is not None:
            self._clock_offset = database_now - datetime.now(UTC)
        if refresh_due(self.get(schedule_id).times, fires_ahead, accepted=accepted, grace=grace):
            self._stale.add(schedule_id)

    def _reference(self, fire_time: datetime) -> datetime:
        """The time the cached times must lie after to be of use to this run's commit: its fire
        time, or the database's clock estimated from this worker's (corrected by the offset its
        last commit saw) if later, for a fire run late. Refreshing while `spare` times are still
        ahead is the margin: one of them may pass during the job, or within the estimate's error.
        """
        if self._clock_offset is None:
            return fire_time
        return max(fire_time, datetime.now(UTC) + self._clock_offset)

    async def _look_up(self, schedule_id: str, reference: datetime) -> None:
        error = await self._describe(schedule_id)
        if error is not None and not ahead_of(self.get(schedule_id).times, reference):
            # Nothing cached would serve the commit: without a time the row keeps a deadline
            # that may be this very fire's, paging at fire + grace although the run succeeded.
            # One more try before giving up (the commit waits for it, outside any transaction).
            log.info("run.next-fires-retrying", schedule_id=schedule_id, error=error)
            error = await self._describe(schedule_id)
        if error is not None:
            self._failed(schedule_id, error)

    async def _describe(self, schedule_id: str) -> str | None:
        """Describe the schedule into the cache; the error, if it failed."""
        assert self._client is not None
        if self._on_describe is not None:
            self._on_describe()
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
                return None
            return f"{exc.status.name}: {exc.message}"
        except TimeoutError:
            return f"no answer within {self._timeout:g}s"
        self._entries[schedule_id] = NextFires(
            digest=await self._digest(desc), times=tuple(desc.info.next_action_times)
        )
        self._stale.discard(schedule_id)
        return None

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
