"""One soak: schedules firing on three workers while the fault plan runs, then the accounting.

Order of the end, and why:
1. the faults stop (each one ends itself: workers continued or replaced, servers back);
2. every schedule is paused, so the window stops moving: its end is the moment of the pause;
3. in-flight runs settle (nothing of the task queue still running), so no commit lands after
   the count;
4. the count: Temporal's matching times, the outbox, `backfill plan`, the effects table, and
   every run's result (what a replay cost);
5. `backfill run` over each whole window, then `backfill plan` again: what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
from temporalio.client import Client

from cronwarden.activities.contract import OVERLAP_LOCKED, logical_key
from cronwarden.backfill.plan import matching_times
from cronwarden.backfill.window import Window
from cronwarden.schedules.apply import apply_definitions
from cronwarden.store.pool import create_pool
from tests.soak.faults import BACKFILL_TIMEOUT, FaultLog, FaultRunner, backfill_summary
from tests.soak.ledger import ScheduleLedger, not_paused, render
from tests.soak.plan import Fault, make_plan
from tests.soak.runs import Run, collect_runs, lost_to_replays
from tests.soak.stack import Servers, Workers, cronwarden_env
from tests.support.cli import cli, iso
from tests.support.faults.counts import unrecorded_effects
from tests.support.faults.fires import listed_by_plan
from tests.support.faults.tally import effects_of, outbox_keys
from tests.support.schedules import definition
from tests.support.waiting import wait_for

WORKERS = ["w1", "w2", "w3"]
LOCK_TTL = 5.0
SHARED_LOCK = "soak-shared"
WORKER_START_TIMEOUT = 90.0


@dataclass(frozen=True)
class SoakSchedule:
    name: str
    every: int
    overlap: str
    sleep: float
    """The probe job's run time: about a third of the period."""
    lock: str | None = None


# Six schedules every 2-3 s, skip and buffer_one, two of them sharing one lock.
SCHEDULES = (
    SoakSchedule("skip-2s", 2, "skip", 0.6),
    SoakSchedule("buffer-2s", 2, "buffer_one", 0.7),
    SoakSchedule("skip-3s", 3, "skip", 0.9),
    SoakSchedule("buffer-3s", 3, "buffer_one", 1.0),
    SoakSchedule("shared-skip", 2, "skip", 0.5, lock=SHARED_LOCK),
    SoakSchedule("shared-buffer", 3, "buffer_one", 0.8, lock=SHARED_LOCK),
)


@dataclass(frozen=True)
class SoakConfig:
    seed: int
    duration: float
    """Seconds of faults (the run takes longer: setup, settling, the closing backfill)."""
    settle_timeout: float = 180.0


@dataclass
class Report:
    plan: list[Fault]
    ledgers: list[ScheduleLedger]
    problems: list[str]
    """Faults that could not be carried out, and runs that never settled."""
    notes: list[str]
    """What happened besides the plan (a worker that exited on its own)."""

    @property
    def table(self) -> str:
        return render(self.ledgers)

    @property
    def passed(self) -> bool:
        return not self.problems and all(s.verdict == "pass" for s in self.ledgers)

    def render(self) -> str:
        """The table, then what is worth knowing about each schedule, then the problems."""
        lines = [self.table]
        lines += [f"  {s.name}: {note}" for s in self.ledgers for note in s.notes]
        lines += [f"  {note}" for note in self.notes]
        lines += [f"  problem: {problem}" for problem in self.problems]
        return "\n".join(lines)


def fault_plan(config: SoakConfig) -> list[Fault]:
    return make_plan(
        config.seed,
        config.duration,
        workers=WORKERS,
        schedules=[s.name for s in SCHEDULES],
        lock_ttl=LOCK_TTL,
    )


async def run_soak(
    config: SoakConfig,
    *,
    servers: Servers,
    database: str,
    work_dir: Path,
    out: Callable[[str], None] = print,
) -> Report:
    """Run the soak on `servers` (restarted by it) and `database` (migrated, with the probe's
    `test_effects` table); print as it goes; the report holds the table and the verdict."""
    plan = fault_plan(config)
    out(f"soak: seed {config.seed}, {config.duration:g}s of faults, {len(plan)} faults:")
    for fault in plan:
        out(f"  {fault.describe()}")
    task_queue = f"soak-{uuid.uuid4().hex[:8]}"
    suffix = uuid.uuid4().hex[:6]
    ids = {s.name: f"soak-{s.name}-{suffix}" for s in SCHEDULES}
    env = cronwarden_env(servers, database, task_queue)
    client = await Client.connect(servers.temporal.address)
    workers = Workers(env, WORKERS)
    try:
        await workers.ready(timeout=WORKER_START_TIMEOUT)
        created = await _apply(client, database, task_queue, ids)
        log = FaultLog(started=time.monotonic(), out=out, work_dir=work_dir)
        runner = FaultRunner(servers, workers, env, ids, log)
        supervisor = asyncio.create_task(workers.supervise(log.say), name="supervise workers")
        try:
            await asyncio.gather(runner.run(plan), asyncio.sleep(config.duration))
            log.say("faults over; pausing every schedule")
            ends = await _freeze(client, ids, log)
            settled = await _settle(client, task_queue, ids, timeout=config.settle_timeout)
            log.say("runs settled; counting" if settled else "runs did not settle; counting")
        finally:
            supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervisor
        ledgers = await _count(client, database, env, ids, created, ends, log)
        log.say("counted; closing with backfill run over each whole window")
        await _close_with_backfill(env, database, ids, created, ends, ledgers)
        log.say("closing backfill runs done")
        problems = list(log.problems)
        notes = [f"worker {gone}, started again" for gone in workers.exits]
        if not settled:
            problems.append(f"runs still running {config.settle_timeout:g}s after the faults")
        return Report(plan, ledgers, problems, notes)
    finally:
        workers.stop_all()
        workers.save_logs(work_dir / "workers")


async def _apply(
    client: Client, database: str, task_queue: str, ids: dict[str, str]
) -> dict[str, datetime]:
    defs = [
        definition(
            ids[s.name],
            every=f"{s.every}s",
            overlap=s.overlap,
            lock=s.lock,
            lock_ttl=f"{LOCK_TTL:g}s",
            # Retries outlast a server restart: a run that fails for good would pause its
            # schedule (pause_on_failure) for the rest of the soak.
            max_attempts=10,
            args={"sleep": s.sleep},
        )
        for s in SCHEDULES
    ]
    pool = await create_pool(database, max_size=4)
    try:
        await apply_definitions(client, pool, defs, task_queue=task_queue)
    finally:
        await pool.close()
    return {
        name: (await client.get_schedule_handle(sid).describe()).info.created_at
        for name, sid in ids.items()
    }


async def _freeze(client: Client, ids: dict[str, str], log: FaultLog) -> dict[str, datetime]:
    """Pause every schedule; the window of each ends where its pause began. A schedule found
    paused already was paused by a failed run (pause_on_failure): said, since our pause
    overwrites Temporal's note."""
    ends = {}
    for name, sid in ids.items():
        handle = client.get_schedule_handle(sid)
        state = (await handle.describe()).schedule.state
        if state.paused:
            log.paused_by_failure[name] = state.note or "paused"
        ends[name] = datetime.now(UTC)
        await handle.pause(note="soak: the window ends here")
    return ends


async def _settle(client: Client, task_queue: str, ids: dict[str, str], *, timeout: float) -> bool:
    """Wait until no run of the soak is running: not in any schedule's running actions, not in
    visibility (replays); twice in a row, since visibility lags a start by a moment."""
    query = f"TaskQueue = '{task_queue}' AND ExecutionStatus = 'Running'"
    quiet_before = False

    async def quiet() -> bool:
        nonlocal quiet_before
        running = len([e async for e in client.list_workflows(query, limit=1)])
        for sid in ids.values():
            info = (await client.get_schedule_handle(sid).describe()).info
            running += len(info.running_actions)
        was, quiet_before = quiet_before, not running
        return was and not running

    try:
        await wait_for(quiet, timeout=timeout, what="the soak's runs to settle", interval=1.0)
    except AssertionError:
        return False
    return True


async def _count(
    client: Client,
    database: str,
    env: dict[str, str],
    ids: dict[str, str],
    created: dict[str, datetime],
    ends: dict[str, datetime],
    log: FaultLog,
) -> list[ScheduleLedger]:
    runs = await collect_runs(client, env["CRONWARDEN_TASK_QUEUE"])
    lost = lost_to_replays(runs)
    pool = await create_pool(database, max_size=4)
    ledgers = []
    try:
        for s in SCHEDULES:
            sid = ids[s.name]
            window = Window(created[s.name], ends[s.name]).clamped_to(created[s.name])
            times = [
                datetime.fromtimestamp(t, UTC)
                async for page in matching_times(client, sid, window)
                for t in page
            ]
            due = {logical_key(sid, t) for t in not_paused(times, log.paused.get(s.name, []))}
            async with pool.acquire() as conn:
                effects = await effects_of(conn, sid)
                unrecorded = await unrecorded_effects(conn, sid)
                committed = await outbox_keys(conn, sid)
            ledger = ScheduleLedger(
                name=s.name,
                overlap=s.overlap,
                due=due,
                committed=committed,
                listed=await listed_by_plan(env, sid, window.start, window.end),
                duplicate_effects=effects.duplicates,
                unrecorded_effects=unrecorded,
                lost_to_replays=[r.workflow_id for r in lost if r.schedule_id == sid],
                notes=_notes(sid, runs),
            )
            if s.name in log.paused_by_failure:
                ledger.notes.append(f"found paused at the end: {log.paused_by_failure[s.name]}")
            info = (await client.get_schedule_handle(sid).describe()).info
            ledger.notes.append(
                f"Temporal: {info.num_actions} actions, {info.num_actions_skipped_overlap} "
                f"skipped by the overlap policy, {info.num_actions_missed_catchup_window} "
                "missed the catchup window"
            )
            ledgers.append(ledger)
    finally:
        await pool.close()
    return ledgers


def _notes(schedule_id: str, runs: list[Run]) -> list[str]:
    mine = [r for r in runs if r.schedule_id == schedule_id]
    live, replays = [r for r in mine if not r.replay], [r for r in mine if r.replay]
    skipped = [r for r in live if r.outcome == OVERLAP_LOCKED]
    failed = [r for r in mine if r.status == "failed"]
    notes = [
        f"{len(live)} live runs, {len(replays)} replays, "
        f"{len(skipped)} live runs ended overlap-locked (lease held), {len(failed)} runs failed"
    ]
    notes += [f"failed {r.workflow_id}: {r.error}" for r in failed[:3]]
    return notes


async def _close_with_backfill(
    env: dict[str, str],
    database: str,
    ids: dict[str, str],
    created: dict[str, datetime],
    ends: dict[str, datetime],
    ledgers: list[ScheduleLedger],
) -> None:
    """`backfill run` over each whole window, as an operator closes the gaps; then the plan
    again: a key still listed is one that even backfill could not repair."""
    for ledger, s in zip(ledgers, SCHEDULES, strict=True):
        sid = ids[s.name]
        start, end = created[s.name], ends[s.name]
        window = ["--start", iso(start), "--end", iso(end)]
        # Paused by the soak itself to freeze the windows: the replays are meant to run anyway.
        args = ["backfill", "run", sid, *window, "--yes", "--include-paused", "--json"]
        result = await cli(env, *args, timeout=BACKFILL_TIMEOUT)
        ledger.notes.append(f"closing backfill run: exit {result.code}, {backfill_summary(result)}")
        ledger.left = await listed_by_plan(env, sid, start, end)
    # Effects may have doubled during the replays: count them again.
    pool: asyncpg.Pool = await create_pool(database, max_size=2)
    try:
        async with pool.acquire() as conn:
            for ledger in ledgers:
                sid = ids[ledger.name]
                ledger.duplicate_effects = (await effects_of(conn, sid)).duplicates
                ledger.unrecorded_effects = await unrecorded_effects(conn, sid)
    finally:
        await pool.close()
