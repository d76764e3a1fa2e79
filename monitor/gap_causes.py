"""An overdue page's likely cause: asked of Temporal when the incident opens, within a bound.

A page already says what closes the gap from the heartbeat row alone (`scan.heartbeat_problem`
puts the `backfill run` command in its details). Why the fires are missing (no worker polls
the task queue, a run holds the overlap policy, a pause) only Temporal knows: `gap_cause` reads
one schedule's describe, a visibility list and its queues. The pass asks for at most
`per_pass` schedules, `concurrency` at a time, and waits at most `timeout` seconds in all; a
schedule not answered by then, an error, or no Temporal at all leaves the cause out and the
page goes out as it would have. The monitor keeps paging from Postgres alone.

A fleet (system) incident asks nothing per member: hundreds of schedules going overdue together
is one outage, and its cause is not found one describe at a time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import asyncpg
from temporalio.client import Client

from cronwarden.backfill.causes import next_command
from cronwarden.backfill.explain import gap_cause
from cronwarden.logs import get_logger
from cronwarden.monitor.scan import Problem

log = get_logger("cronwarden.monitor")

ClientSource = Callable[[], Awaitable[Client | None]]
GapCause = Callable[..., Awaitable[dict[str, Any] | None]]


@dataclass(frozen=True)
class CausePolicy:
    timeout: float = 4.0
    """Longest a pass waits for Temporal's causes, connecting included, for all its pages."""
    per_pass: int = 20
    """Schedules asked about per pass; the pages of the others go out without a cause."""
    concurrency: int = 8
    """Schedules asked about at once."""


async def with_causes(
    problems: Sequence[Problem],
    *,
    client: ClientSource | None,
    pool: asyncpg.Pool,
    now: datetime,
    policy: CausePolicy,
    explain: GapCause = gap_cause,
) -> dict[str, Problem]:
    """Of `problems` (incidents about to open), the overdue and never-ran ones whose likely
    cause Temporal gave in time, with `cause`, `cause_kind` and the closing command in their
    details, by schedule id. Never raises what Temporal or a lookup raises."""
    asked = [p for p in problems if p.late and p.expected_at is not None][: policy.per_pass]
    if client is None or not asked:
        return {}
    deadline = time.monotonic() + policy.timeout
    try:
        async with asyncio.timeout(policy.timeout):
            connected = await client()
    except TimeoutError:
        connected = None
    if connected is None:
        return {}
    gate = asyncio.Semaphore(policy.concurrency)
    found: dict[str, Problem] = {}

    async def one(problem: Problem) -> None:
        assert problem.expected_at is not None
        async with gate:
            try:
                cause = await explain(
                    connected, pool, problem.schedule_id, since=problem.expected_at, now=now
                )
            except Exception as exc:
                # Temporal down or slow, the schedule gone or not cronwarden's: the page goes
                # out with the command alone.
                log.info(
                    "monitor.gap-cause-unknown",
                    schedule_id=problem.schedule_id,
                    error=type(exc).__name__,
                )
                return
        if cause is not None:
            found[problem.schedule_id] = caused(problem, cause, now=now)

    tasks = [asyncio.create_task(one(p)) for p in asked]
    _, pending = await asyncio.wait(tasks, timeout=max(deadline - time.monotonic(), 0.0))
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
        log.info(
            "monitor.gap-causes-late",
            schedule_ids=[p.schedule_id for p, t in zip(asked, tasks, strict=True) if t in pending],
            timeout=policy.timeout,
        )
    return found


def caused(problem: Problem, cause: dict[str, Any], *, now: datetime) -> Problem:
    """`problem` with a cause of `gap_cause`'s shape in its details. The command still spans
    the whole gap, from the expected fire to `now` (the cause's own spans its group only: the
    failed runs, not the fires the pause after them held), with the flags the cause's command
    needs (`--include-paused` while Temporal holds the schedule paused, `--include-held`)."""
    assert problem.expected_at is not None
    own = str(cause.get("next_command") or "")
    details = {
        **problem.details,
        "cause": cause.get("text"),
        "cause_kind": cause.get("cause"),
        "next_command": next_command(
            problem.schedule_id,
            problem.expected_at,
            now,
            paused=" --include-paused" in own,
            held=" --include-held" in own,
        ),
    }
    return replace(problem, details=details)
