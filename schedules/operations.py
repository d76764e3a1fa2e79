"""Operator actions on one managed schedule: pause, unpause, trigger, delete.

Pause and unpause are Temporal's patch operations (no read-modify-write of the schedule), so they
cannot overwrite a concurrent apply or pause_on_failure. Each orders its two writes so that a
failure between them leaves the monitor paging (loud) rather than silent: pause changes Temporal
first, then the heartbeat row; unpause lifts the row's pause first (with a deadline no earlier
than now, in the same statement), then unpauses Temporal. A pause lifted in Temporal alone (its
UI or CLI) is noticed by the monitor, which checks every paused row against Temporal.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg
from pydantic import TypeAdapter, ValidationError
from temporalio.client import Client

from cronwarden.activities.contract import DIGEST_MEMO, logical_key
from cronwarden.errors import CronwardenError
from cronwarden.logs import get_logger
from cronwarden.schedules.health import OPERATOR_NOTE, held_by_operator
from cronwarden.schedules.inventory import (
    RecentRun,
    ScheduleView,
    action_memo,
    describe_or_none,
    get_managed,
    no_such_schedule,
)
from cronwarden.schedules.lives import delete_schedule
from cronwarden.schedules.local_times import horizon_of
from cronwarden.schedules.mapping import DEFINITION_MEMO
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.store import change_log, heartbeats, pause_history
from cronwarden.times import utc_text, utc_text_or_none

log = get_logger("cronwarden.schedules")

_TIMEDELTA = TypeAdapter(timedelta)
# The schedule file's default, for a definition whose stored grace cannot be read.
DEFAULT_GRACE: timedelta = ScheduleDefinition.model_fields["heartbeat_grace"].default

# How far the local clock may be off the Temporal server's when `trigger` recognises its run.
TRIGGER_CLOCK_SKEW = timedelta(seconds=2)
# How long `trigger` waits for Temporal to report the run it started.
TRIGGER_WAIT_SECONDS = 10.0


class TriggerNotStarted(CronwardenError):
    """Temporal accepted the trigger but started no run (overlap policy, collision)."""


@dataclass
class Triggered:
    schedule_id: str
    workflow_id: str | None
    """None when the run is buffered behind a running one (overlap buffer_one)."""
    logical_key: str | None
    fire_time: datetime | None
    note: str


def operator_note(reason: str | None) -> str:
    return f"{OPERATOR_NOTE}: {reason}" if reason else OPERATOR_NOTE


async def pause(
    client: Client,
    pool: asyncpg.Pool,
    schedule_id: str,
    *,
    reason: str | None,
    who: change_log.Who | None = None,
    until: datetime | None = None,
) -> ScheduleView:
    """`who`: recorded in the change log, in the heartbeat row's transaction. `until`: when
    the monitor unpauses it (`end_timed_pause`); None: until `unpause`. Check it first
    (`timed_pause.pause_end`)."""
    await get_managed(client, schedule_id)
    await client.get_schedule_handle(schedule_id).pause(note=operator_note(reason))
    details: dict[str, object] = {"until": utc_text(until)} if until is not None else {}
    async with pool.acquire() as conn, conn.transaction():
        await heartbeats.pause(
            conn, schedule_id=schedule_id, reason=reason or OPERATOR_NOTE, until=until
        )
        await _record(conn, who, change_log.PAUSE, schedule_id, details)
    log.info(
        "schedule.paused", schedule_id=schedule_id, reason=reason, until=utc_text_or_none(until)
    )
    return await get_managed(client, schedule_id)


MONITOR_ACTOR = "cronwarden-monitor"
"""Who the change log names for the changes the monitor makes on its own."""
TIMED_PAUSE_ENDED = change_log.Who(actor=MONITOR_ACTOR, reason="timed pause ended")


async def end_timed_pause(
    client: Client, pool: asyncpg.Pool, schedule_id: str, *, until: datetime
) -> ScheduleView | None:
    """Unpause a schedule whose timed pause (ending at `until`) is over, as `unpause` does,
    recorded as the monitor's change. None, and nothing done, when the row no longer holds that
    pause (unpaused, or paused again, since the monitor read it). Raises whatever keeps the
    unpause from happening: the monitor pages and tries again."""
    async with pool.acquire() as conn:
        row = await heartbeats.get(conn, schedule_id)
    if row is None or not row["paused"] or row["paused_until"] != until:
        return None
    return await unpause(client, pool, schedule_id, who=TIMED_PAUSE_ENDED)


async def unpause(
    client: Client, pool: asyncpg.Pool, schedule_id: str, *, who: change_log.Who | None = None
) -> ScheduleView:
    """`who`: recorded in the change log with the last write, once Temporal has unpaused."""
    before = await get_managed(client, schedule_id)
    # Our best guess of the next fire before Temporal runs the schedule again; the row's pause
    # and its stale deadline go together (`heartbeats.lift_pause`), then the exact next fire
    # once Temporal has it.
    guess = before.next_fire_times[0] if before.next_fire_times else None
    async with pool.acquire() as conn:
        had_row = await heartbeats.lift_pause(conn, schedule_id, next_expected_at=guess)
    await client.get_schedule_handle(schedule_id).unpause(note="unpaused by operator")
    if before.paused and held_by_operator(before.note):
        # Temporal held the operator's pause until now, whatever the row said: a run of this
        # command interrupted between its two writes lifted the row (and closed the recorded
        # pause) early, and the fires between were held all the same, not missed.
        async with pool.acquire() as conn:
            await pause_history.extend_last(conn, schedule_id)
    after = await get_managed(client, schedule_id)
    next_fire = after.next_fire_times[0] if after.next_fire_times else None
    async with pool.acquire() as conn, conn.transaction():
        await _record(conn, who, change_log.UNPAUSE, schedule_id)
        if had_row:
            # The time spent paused is not a missed run: expect the next fire from now.
            await heartbeats.resume(conn, schedule_id=schedule_id, next_expected_at=next_fire)
        else:
            # No row (never applied here, or lost): start tracking, or the monitor never would.
            # A zoned schedule's horizon too, as apply stored it: past it Temporal fires
            # nothing, and without it no page would say so.
            memo = await action_memo(client, after.description)
            digest = memo.get(DIGEST_MEMO)
            definition = memo.get(DEFINITION_MEMO)
            await heartbeats.expect(
                conn,
                schedule_id=schedule_id,
                next_expected_at=next_fire,
                grace=_grace(before),
                definition_digest=digest if isinstance(digest, str) else None,
                compiled_until=horizon_of(definition if isinstance(definition, dict) else None),
            )
    log.info(
        "schedule.unpaused",
        schedule_id=schedule_id,
        next_expected_at=utc_text_or_none(next_fire),
        heartbeat_created=not had_row,
    )
    return after


async def _record(
    conn: asyncpg.Connection,
    who: change_log.Who | None,
    action: str,
    schedule_id: str,
    details: dict[str, object] | None = None,
) -> None:
    if who is not None:
        await change_log.record(conn, who, [change_log.Entry(action, schedule_id, details or {})])


def _grace(view: ScheduleView) -> timedelta:
    raw = (view.definition or {}).get("heartbeat_grace")
    try:
        return _TIMEDELTA.validate_python(raw)
    except ValidationError:
        return DEFAULT_GRACE


async def delete_target(client: Client, pool: asyncpg.Pool, schedule_id: str) -> bool:
    """What `delete` would remove: True for a managed schedule in Temporal, False for a heartbeat
    row whose schedule is already gone (deleted elsewhere). Refuses anything else."""
    if await describe_or_none(client, schedule_id) is not None:
        await get_managed(client, schedule_id)
        return True
    async with pool.acquire() as conn:
        if await heartbeats.get(conn, schedule_id) is None:
            raise await no_such_schedule(client, schedule_id)
    return False


async def delete(
    client: Client, pool: asyncpg.Pool, schedule_id: str, *, who: change_log.Who | None = None
) -> bool:
    """Remove the schedule and its heartbeat row; the outbox keeps the history of its runs.
    Returns False when only a leftover heartbeat row was removed. `who`: recorded in the change
    log in the heartbeat row's transaction."""
    in_temporal = await delete_target(client, pool, schedule_id)
    if in_temporal:
        # Records the end of the schedule's life first; deleted by someone else since we
        # looked is not an error: the row still goes.
        await delete_schedule(client, pool, schedule_id)
    async with pool.acquire() as conn, conn.transaction():
        # A deleted schedule must not leave a heartbeat that the monitor pages on for ever.
        await heartbeats.delete(conn, schedule_id)
        await _record(conn, who, change_log.DELETE, schedule_id, {"in_temporal": in_temporal})
    log.info(
        "schedule.deleted", schedule_id=schedule_id, by="schedules delete", in_temporal=in_temporal
    )
    return in_temporal


def server_time_floor(view: ScheduleView) -> datetime:
    """A time the Temporal server's clock had certainly reached when `view` was described: the
    latest server timestamp the description carries."""
    stamps = [view.description.info.created_at]
    if view.description.info.last_updated_at is not None:
        stamps.append(view.description.info.last_updated_at)
    stamps += [r.started_at for r in view.recent_runs]
    return max(stamps)


def same_second_wait(newest: datetime | None, server_floor: datetime) -> float:
    """Seconds to wait so that the server's clock is past the second of the newest run.

    Measured against the server's own timestamps, not the local clock: a local clock behind
    the server's would let the trigger land in the newest run's second and be dropped.
    """
    if newest is None:
        return 0.0
    wait = (newest.replace(microsecond=0) + timedelta(seconds=1) - server_floor).total_seconds()
    return wait + 0.05 if wait > 0 else 0.0


def triggered_run(
    runs: list[RecentRun],
    *,
    known: set[str],
    grid: set[datetime],
    earliest: datetime,
    latest: datetime,
) -> RecentRun | None:
    """The run a trigger started, among a schedule's recent runs: new, scheduled within the
    trigger's second range, and not at one of the schedule's own fire times (a scheduled fire
    landing while we wait, or buffered behind a running run, is not the trigger's)."""
    lowest = earliest.replace(microsecond=0)
    fits = [
        r
        for r in runs
        if r.workflow_id not in known and r.scheduled_at not in grid
        if lowest <= r.scheduled_at <= latest
    ]
    return min(fits, key=lambda r: r.scheduled_at) if fits else None


async def trigger(
    client: Client, schedule_id: str, *, wait_seconds: float = TRIGGER_WAIT_SECONDS
) -> Triggered:
    """Start a run now, with the schedule's overlap policy, and find the run Temporal started.

    Temporal names a triggered run like a scheduled one: `{id}-{now, whole seconds}`, with the
    same time in TemporalScheduledStartTime. Two starts in the same second get the same workflow
    id and the second is dropped (temporalio/temporal#3614), so we wait until the server's clock
    is past the second of the newest run.
    """
    before = await get_managed(client, schedule_id)
    described = time.monotonic()
    known = {r.workflow_id for r in before.recent_runs}
    server_floor = server_time_floor(before)
    newest = max((r.scheduled_at for r in before.recent_runs), default=None)
    wait = same_second_wait(newest, server_floor)
    if wait > 0:
        await asyncio.sleep(wait)
    sent = datetime.now(UTC)
    # The trigger's instant is at least the server floor plus the time since; the local clock
    # is trusted only within TRIGGER_CLOCK_SKEW.
    earliest = max(
        server_floor + timedelta(seconds=time.monotonic() - described), sent - TRIGGER_CLOCK_SKEW
    )
    await client.get_schedule_handle(schedule_id).trigger()
    latest = datetime.now(UTC) + TRIGGER_CLOCK_SKEW
    log.info("schedule.triggered", schedule_id=schedule_id)
    grid = set(before.next_fire_times)

    deadline = time.monotonic() + wait_seconds
    current = before
    while time.monotonic() < deadline:
        current = await get_managed(client, schedule_id)
        grid |= set(current.next_fire_times)
        # A skip counted while no scheduled fire was due is the trigger's; with one due, only
        # a started run of ours settles it.
        fire_due = any(earliest <= t <= latest for t in grid)
        skipped = current.skipped_overlap > before.skipped_overlap
        if skipped and not fire_due:
            raise _skipped(schedule_id, current)
        run = triggered_run(
            current.recent_runs, known=known, grid=grid, earliest=earliest, latest=latest
        )
        if run is not None:
            return Triggered(
                schedule_id=schedule_id,
                workflow_id=run.workflow_id,
                logical_key=logical_key(schedule_id, run.scheduled_at),
                fire_time=run.scheduled_at,
                note="off the schedule's grid: the key names the trigger time, not a fire time",
            )
        if skipped:
            raise _skipped(schedule_id, current)
        await asyncio.sleep(0.2)
    if current.running and current.overlap == "buffer_one":
        return Triggered(
            schedule_id=schedule_id,
            workflow_id=None,
            logical_key=None,
            fire_time=None,
            note=f"buffered: it starts when the running run ({current.running[0]}) finishes",
        )
    raise TriggerNotStarted(
        f"Temporal reported no new run of '{schedule_id}' within {wait_seconds:g}s; "
        f"check `cronwarden schedules describe {schedule_id}`"
    )


def _skipped(schedule_id: str, current: ScheduleView) -> TriggerNotStarted:
    return TriggerNotStarted(
        f"Temporal skipped the triggered run of '{schedule_id}': overlap is "
        f"{current.overlap} and a run was still going; try again when it has finished"
    )
