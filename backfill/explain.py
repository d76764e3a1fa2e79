"""`explain`: the causes of a window's slots without a commit, for the commands that show
them (`backfill plan`, `audit`, `schedules describe`) and the status page and pages: the
evidence gathered once (backfill/evidence.py), judged once (backfill/causes.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from temporalio.client import Client, ScheduleDescription

from cronwarden.activities.contract import fire_time_of_key
from cronwarden.backfill.causes import (
    OFF_GRID,
    Causes,
    Evidence,
    Group,
    judge,
    next_command,
    summarise,
    temporal_counts,
)
from cronwarden.backfill.evidence import gather, retention_start
from cronwarden.backfill.plan import (
    GoneSchedule,
    ManagedSchedule,
    Plan,
    expected_pages,
    load_managed,
    plan,
)
from cronwarden.backfill.window import Window, due_cap
from cronwarden.errors import CronwardenError
from cronwarden.store import heartbeats, outbox
from cronwarden.store.pause_history import Pause


async def explain(
    client: Client,
    conn: Any,
    schedule: ManagedSchedule | GoneSchedule,
    *,
    window: Window,
    missing: Sequence[int],
    in_flight: Sequence[int] = (),
    held: Sequence[int] = (),
    pauses: Sequence[Pause] = (),
    beat: dict[str, Any] | None,
    now: datetime,
) -> Causes:
    """The causes of a planned or audited window's slots without a commit (epoch seconds):
    `missing`, `in_flight` (runs open now) and `held` (inside an operator's pause)."""
    desc = schedule.description
    evidence = await gather_for(
        client, conn, schedule, missing, in_flight=in_flight, beat=beat, now=now
    )
    causes = summarise(
        evidence,
        missing,
        held=held,
        pauses=pauses,
        in_flight=in_flight,
        paused_now=bool(desc and desc.schedule.state.paused),
    )
    covers_life = (
        desc is not None
        # A window clamped to the life's start begins the second after the creation.
        and window.start <= desc.info.created_at + timedelta(seconds=1)
        and window.end >= now - timedelta(minutes=1)
    )
    causes.temporal = temporal_counts(causes, desc, covers_life=covers_life)
    return causes


_LOOKBACK = timedelta(days=1)


async def gather_for(
    client: Client,
    conn: Any,
    schedule: ManagedSchedule | GoneSchedule,
    missing: Sequence[int],
    *,
    in_flight: Sequence[int] = (),
    beat: dict[str, Any] | None,
    now: datetime,
) -> Evidence:
    """The evidence for the schedule's slots `missing` and `in_flight` (epoch seconds,
    ascending)."""
    run_input = schedule.run_input if isinstance(schedule, ManagedSchedule) else None
    timeout = schedule.execution_timeout if isinstance(schedule, ManagedSchedule) else None
    return await gather(
        client,
        conn,
        schedule_id=schedule.schedule_id,
        description=schedule.description,
        missing=missing,
        in_flight=in_flight,
        task_queue=schedule.task_queue if isinstance(schedule, ManagedSchedule) else None,
        job=run_input.job if run_input else None,
        overlap=run_input.overlap if run_input else "skip",
        # A run that made Temporal skip a slot started at most its own timeout before it.
        lookback=min(timeout or _LOOKBACK, _LOOKBACK),
        beat=beat,
        retained_from=await retention_start(client, now=now) if len(missing) else None,
    )


async def explain_plan(
    client: Client,
    pool: asyncpg.Pool,
    schedule: ManagedSchedule | GoneSchedule,
    planned: Plan,
    *,
    now: datetime,
) -> Causes:
    """The causes of a plan's missing and held slots (`backfill plan`)."""
    async with pool.acquire() as conn:
        beat = await heartbeats.get(conn, schedule.schedule_id)
        return await explain(
            client,
            conn,
            schedule,
            window=planned.window,
            missing=planned.missing,
            held=[] if planned.held_included else planned.paused,
            pauses=planned.pauses,
            beat=beat,
            now=now,
        )


OFF_GRID_READ = 1000
"""Newest outbox records of a window read to name the off-grid ones (the count is exact)."""


async def name_off_grid(
    client: Client,
    conn: Any,
    causes: Causes,
    *,
    window: Window,
    count: int,
    live: ScheduleDescription | None,
) -> None:
    """Add the window's `count` records at times the spec in force does not produce (a manual
    trigger, a spec changed since) to `causes`, naming those among its newest records: one
    outbox read and the matching times of their span."""
    if count <= 0 or window.empty:
        return
    rows = await outbox.recent(
        conn, {causes.schedule_id: window.start}, until=window.end, limit=OFF_GRID_READ
    )
    seconds = sorted(int(r["fire_time"].timestamp()) for r in rows)
    found: list[int] = []
    if seconds:
        span = Window(
            datetime.fromtimestamp(seconds[0], UTC), datetime.fromtimestamp(seconds[-1], UTC)
        )
        grid: set[int] = set()
        async for page in expected_pages(client, conn, causes.schedule_id, span, live=live):
            grid.update(page)
        found = [s for s in seconds if s not in grid]
    group = Group(OFF_GRID, "committed at a time the spec does not produce (a manual trigger)")
    for s in found:
        group.add(s)
    group.count = count
    causes.groups.append(group)
    causes.groups.sort(key=lambda g: g.first_s)


RECENT = timedelta(days=1)
"""The window `schedules describe` explains: the last day, as `audit` does by default."""


async def recent_causes(
    client: Client,
    pool: asyncpg.Pool,
    schedule_id: str,
    *,
    now: datetime | None = None,
    since: timedelta = RECENT,
) -> dict[str, Any]:
    """The causes of the missing slots of the last `since` (`schedules describe`): the window,
    its missing count and its causes, in the `--json` shape of `backfill plan`'s."""
    schedule = await load_managed(client, schedule_id)
    desc = schedule.description
    now = datetime.now(UTC) if now is None else now
    cap = due_cap(
        now,
        desc.info.next_action_times,
        desc.schedule.spec.jitter,
        paused=desc.schedule.state.paused,
    )
    planned = await plan(client, pool, schedule, Window(now - since, now).capped_to(cap), now=now)
    causes = await explain_plan(client, pool, schedule, planned, now=now)
    return {
        "window": planned.window.as_json(),
        "missing": len(planned.missing),
        "paused_fires": len(planned.paused),
        "causes": causes.as_json(),
        "temporal_counts": causes.temporal,
    }


async def causes_of_keys(
    client: Client, pool: asyncpg.Pool, schedule_id: str, keys: Sequence[str], *, now: datetime
) -> Causes | None:
    """The causes of a few missing keys of a live schedule (`status`; each of them is among
    `named`); None when the schedule cannot be read as cronwarden's (deleted meanwhile, not
    managed)."""
    try:
        schedule = await load_managed(client, schedule_id)
    except CronwardenError:
        return None
    seconds = sorted(
        int(t.timestamp()) for k in keys if (t := fire_time_of_key(schedule_id, k)) is not None
    )
    async with pool.acquire() as conn:
        beat = await heartbeats.get(conn, schedule_id)
        causes = await explain(
            client,
            conn,
            schedule,
            window=Window(datetime.fromtimestamp(seconds[0], UTC), now)
            if seconds
            else Window(now, now),
            missing=seconds,
            beat=beat,
            now=now,
        )
    return causes


async def slot_causes(
    client: Client,
    pool: asyncpg.Pool,
    schedule_id: str,
    fire_times: Sequence[datetime],
    *,
    now: datetime,
) -> dict[datetime, dict[str, Any]]:
    """Each of `fire_times` (a grid's missing slots) with its cause, its sentence and the
    command that closes its gap (None while its run is open), for the status page: one
    describe of the schedule, one paged visibility list over their span, the describes of the
    runs in flight and one DescribeTaskQueue per queue. Raises what Temporal raises."""
    if not fire_times:
        return {}
    schedule = await load_managed(client, schedule_id)
    seconds = sorted({int(t.timestamp()) for t in fire_times})
    async with pool.acquire() as conn:
        beat = await heartbeats.get(conn, schedule_id)
        evidence = await gather_for(client, conn, schedule, seconds, beat=beat, now=now)
    paused = schedule.description.schedule.state.paused
    found: dict[datetime, dict[str, Any]] = {}
    for s in seconds:
        verdict = judge(evidence, s)
        t = datetime.fromtimestamp(s, UTC)
        found[t] = {
            "cause": verdict.cause,
            "text": verdict.text,
            "run": verdict.run,
            "next_command": None
            if verdict.in_flight
            else next_command(schedule_id, t, t, paused=paused),
        }
    return found


async def gap_cause(
    client: Client,
    pool: asyncpg.Pool,
    schedule_id: str,
    *,
    since: datetime,
    now: datetime,
) -> dict[str, Any] | None:
    """The likely cause of an overdue schedule's gap, from `since` (its heartbeat's expected
    fire) to `now`, and the command that closes it, for an overdue page: the first cause of
    the window's missing slots (the `causes` shape), or None when none is missing yet (the
    run is late, not lost). Without Temporal, `next_command(schedule_id, since, now)` alone
    still names the command."""
    schedule = await load_managed(client, schedule_id)
    window = Window(since.replace(microsecond=0), now.replace(microsecond=0))
    planned = await plan(client, pool, schedule, window, now=now)
    if not planned.missing and not planned.paused:
        return None
    causes = await explain_plan(client, pool, schedule, planned, now=now)
    found = causes.as_json()
    return found[0] if found else None
