"""The status page's cost, served by a real `cronwarden monitor` process over HTTP.

Ten thousand heartbeat rows; the first hundred overdue (so they fill page 1, problems first),
each a real, paused schedule firing every second in Temporal (one in ten with jitter, whose
nominal grid needs a scratch schedule), every other slot committed: page 1 is the heaviest page
there is, a hundred full timelines. The monitor's background task reads their grids; the
measurement starts once page 1 shows every one of them.

Measured: `/` read afresh (the shared read expired) beside `/` served from the shared read; its
size; the monitor's memory added by 20 concurrent loads of `/` (peak resident memory during the
loads, less the idle figure before them); how long `/healthz` takes meanwhile (the event loop
the monitor pages from); how many schedules the 20 loads created in Temporal; one schedule's own
page.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from statistics import median

from temporalio.client import Client, ScheduleState

from bench.stack import BenchStack, run_alone
from bench.table import Row, beside
from cronwarden.embedded import free_port
from cronwarden.monitor.status_view import PageLimits
from cronwarden.schedules.mapping import to_temporal
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.schedules.preview import PREVIEW_PREFIX
from cronwarden.store.pool import create_pool

ROWS, SHOWN = 10_000, 100
QUICK_ROWS, QUICK_SHOWN = 60, 5
LOADS = 20
JITTERED_EVERY = 10
"""One schedule in ten has jitter (10 of page 1's 100, one background round's scratch budget)."""
TASK_QUEUE = "bench-status-page"
GOAL_MS = 2_000.0
GOAL_BYTES = 1_000_000
GOAL_MIB = 50.0
SLOTS = PageLimits().slots
FRESH_FOR = PageLimits().fresh_for

_HEARTBEATS = """
INSERT INTO cronwarden.heartbeats (schedule_id, next_expected_at, last_success_at, grace)
SELECT CASE WHEN i <= $2 THEN $3 || '-' || i ELSE 'bench-quiet-' || i END,
       CASE WHEN i <= $2 THEN now() - interval '1 hour' ELSE now() + interval '1 hour' END,
       now() - interval '1 hour',
       interval '1 minute'
  FROM generate_series(1, $1) AS i
"""
# Every other second since the schedules' creation committed, as a worker would have.
_OUTBOX = """
INSERT INTO cronwarden.outbox (logical_key, schedule_id, fire_time, attempt, fencing_token,
                               worker, args_digest, workflow_id, run_id)
SELECT s.id || '@' || to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), s.id, t, 1, 1,
       'bench', 'd', s.id || '-' || to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       'r'
  FROM unnest($1::text[]) AS s(id),
       generate_series(date_trunc('second', $2::timestamptz) + interval '2 seconds',
                       now() + interval '10 minutes', interval '2 seconds') AS t
"""


async def _create_paused(client: Client, schedule_id: str, *, jitter: bool) -> None:
    fields = {"id": schedule_id, "job": "probe", "every": "1s"}
    if jitter:
        # Its nominal grid needs a scratch schedule: what a page load used to create.
        fields["jitter"] = "1s"
    defn = ScheduleDefinition.model_validate(fields)
    schedule = to_temporal(defn, task_queue=TASK_QUEUE)
    # Paused: its spec is evaluated all the same, and no run is ever started.
    await client.create_schedule(
        schedule_id, replace(schedule, state=ScheduleState(paused=True, note="benchmark"))
    )


async def _get(port: int, path: str) -> tuple[int, bytes, float]:
    """Status, body and milliseconds of one GET."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    await writer.drain()
    raw = await reader.read()
    elapsed = (time.perf_counter() - started) * 1000
    writer.close()
    await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), body, elapsed


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def _reset_peak(pid: int) -> bool:
    """Reset the process's peak resident memory (VmHWM) to its current one; False if the
    kernel does not allow it."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


async def _until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(1.0)


async def _scratch_made(client: Client) -> set[str]:
    """Every scratch schedule visibility has seen, deleted since or not (their system
    workflows outlive them)."""
    query = "TemporalNamespaceDivision = 'TemporalScheduler'"
    return {e.id async for e in client.list_workflows(query) if PREVIEW_PREFIX in e.id}


async def measure(stack: BenchStack, *, quick: bool) -> list[Row]:
    rows, shown = (QUICK_ROWS, QUICK_SHOWN) if quick else (ROWS, SHOWN)
    prefix = f"bench-page-{uuid.uuid4().hex[:6]}"
    ids = [f"{prefix}-{i}" for i in range(1, shown + 1)]
    client = stack.client
    created = datetime.now(UTC)
    await asyncio.gather(
        *(_create_paused(client, sid, jitter=i % JITTERED_EVERY == 0) for i, sid in enumerate(ids))
    )
    dsn = stack.dsn_for("status_page")
    pool = await create_pool(dsn, max_size=4)
    port = free_port()
    env = stack.cli_env(dsn, task_queue=TASK_QUEUE)
    env.update(CRONWARDEN_TEMPORAL_UI_URL="http://127.0.0.1:8233")
    monitor = await asyncio.create_subprocess_exec(
        *stack.python_argv(
            "-m",
            "cronwarden",
            "monitor",
            "--interval",
            "1h",
            "--metrics-port",
            str(port),
            "--metrics-host",
            "127.0.0.1",
        ),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await pool.execute(_HEARTBEATS, rows, shown, prefix)
        # Until each schedule has produced the slots a timeline shows (a schedule has no slot
        # before its creation): a fixed span of the clock, not a guess at a condition.
        await asyncio.sleep(max(SLOTS + 1 - (datetime.now(UTC) - created).total_seconds(), 0))
        await pool.execute(_OUTBOX, ids, created)
        await pool.execute("ANALYZE")

        async def serving() -> bool:
            try:
                return (await _get(port, "/healthz"))[0] == 200
            except OSError:
                return False

        await _until(serving, timeout=60, what="the monitor's port")
        first_kib = _status_kib(monitor.pid, "VmRSS")

        async def grids_in() -> bool:
            try:
                status, body, _ = await _get(port, "/")
            except OSError:
                return False
            return status == 200 and body.count(b'data-grid="known"') >= shown

        await _until(grids_in, timeout=180, what="page 1's grids read by the monitor")
        scratch_before = await _scratch_made(client)

        async def fresh_load(path: str) -> tuple[bytes, float]:
            # Past the shared read's lifetime: this load reads and renders afresh.
            await asyncio.sleep(FRESH_FOR + 0.5)
            status, body, ms = await _get(port, path)
            assert status == 200, body[:200]
            return body, ms

        cold, warm, detail = [], [], []
        size = 0
        for _ in range(stack.repeat):
            body, ms = await fresh_load("/")
            size = len(body)
            cold.append(ms)
            warm.append((await _get(port, "/"))[2])
        for _ in range(stack.repeat):
            detail.append((await fresh_load(f"/schedules/{ids[0]}"))[1])

        # 20 loads at once, the shared read expired first: what one burst costs the monitor.
        await asyncio.sleep(FRESH_FOR + 0.5)
        pid = monitor.pid
        idle_kib = _status_kib(pid, "VmRSS")
        peak_known = _reset_peak(pid)
        stop_probe = asyncio.Event()
        probes: list[float] = []

        async def probe() -> None:
            while not stop_probe.is_set():
                probes.append((await _get(port, "/healthz"))[2])
                await asyncio.sleep(0.02)

        prober = asyncio.create_task(probe())
        answers = await asyncio.gather(*(_get(port, "/") for _ in range(LOADS)))
        stop_probe.set()
        await prober
        peak_kib = _status_kib(pid, "VmHWM") if peak_known else _status_kib(pid, "VmRSS")
        added_mib = max(peak_kib - idle_kib, 0) / 1024
        scratch_after = await _scratch_made(client)
        assert all(status == 200 for status, _, _ in answers)
    finally:
        monitor.terminate()
        await monitor.wait()
        await pool.close()
        await asyncio.gather(*(client.get_schedule_handle(sid).delete() for sid in ids))
    label = f"status page `/`: {rows:,} schedules, page 1 of {-(-rows // PageLimits().page_size)}"
    judged = not quick
    return [
        beside(
            f"{label}, read afresh (median of {stack.repeat})",
            median(cold),
            median(warm),
            unit="ms",
            baseline_note="the same page from the shared read",
            below=GOAL_MS,
            judged=judged,
            digits=1,
        ),
        Row(
            metric=f"{label}: bytes (its first {shown} timelines full, {SLOTS} slots each)",
            ours=f"{size:,} B",
            baseline="9.4 MB before paging (all rows, 10,000 schedules)",
            goal=f"< {GOAL_BYTES:,} B",
            met=size < GOAL_BYTES if judged else None,
        ),
        Row(
            metric=f"{label}: monitor memory added by {LOADS} concurrent loads",
            ours=f"{added_mib:.1f} MiB" + ("" if peak_known else " (RSS after, peak unknown)"),
            baseline=(
                f"{idle_kib / 1024:.1f} MiB idle before them "
                f"({first_kib / 1024:.1f} MiB before the first page load)"
            ),
            goal=f"< {GOAL_MIB:g} MiB",
            met=added_mib < GOAL_MIB if judged else None,
        ),
        Row(
            metric=f"{label}: `/healthz` during the {LOADS} loads, median / max",
            ours=(f"{median(probes):.1f} / {max(probes):.1f} ms" if probes else "-"),
        ),
        Row(
            metric=f"{label}: schedules created in Temporal by {LOADS} concurrent loads",
            ours=f"{len(scratch_after - scratch_before)}",
            baseline=f"before: {len(ids[::JITTERED_EVERY])} per load (one per jittered schedule)",
            goal="0",
            met=scratch_after <= scratch_before,
        ),
        Row(
            metric=f"status page `/schedules/{{id}}`: one schedule, {PageLimits().detail_slots} "
            "slots, read afresh",
            ours=f"{median(detail):.1f} ms",
        ),
    ]


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    run_alone(measure, __doc__)
