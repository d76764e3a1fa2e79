"""An overdue page's cause is asked of Temporal within bounds: a cap per pass, a few at a time,
one deadline for all, and any failure (or no Temporal) leaves it out; the closing command spans
the whole gap whatever the cause's own command spans."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import asyncpg
import pytest
from temporalio.client import Client

from cronwarden.backfill.causes import next_command
from cronwarden.monitor import passes
from cronwarden.monitor.gap_causes import CausePolicy, caused, with_causes
from cronwarden.monitor.pauses import PauseCheck
from cronwarden.monitor.scan import Plan, Problem, heartbeat_problem
from cronwarden.store.incidents import RUNNING_TOO_LONG

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
EXPECTED = NOW - timedelta(hours=1)
POOL = cast(asyncpg.Pool, object())
CLIENT = cast(Client, object())


def overdue(schedule_id: str) -> Problem:
    found = heartbeat_problem(
        {
            "schedule_id": schedule_id,
            "next_expected_at": EXPECTED,
            "grace": timedelta(minutes=1),
            "paused": False,
            "last_success_at": EXPECTED - timedelta(hours=1),
        },
        NOW,
    )
    assert found is not None
    return found


async def connected() -> Client:
    return CLIENT


def cause_of(text: str, command: str | None = None) -> dict[str, Any]:
    return {"cause": "no-worker-polling", "text": text, "next_command": command}


def run(
    problems: list[Problem],
    explain: Callable[..., Awaitable[dict[str, Any] | None]],
    *,
    client: Callable[[], Awaitable[Client | None]] | None = connected,
    policy: CausePolicy | None = None,
) -> dict[str, Problem]:
    return asyncio.run(
        with_causes(
            problems,
            client=client,
            pool=POOL,
            now=NOW,
            policy=policy or CausePolicy(),
            explain=explain,
        )
    )


def test_an_overdue_problem_carries_the_command_from_its_expected_fire_to_now() -> None:
    problem = overdue("nightly")
    assert problem.details["next_command"] == next_command("nightly", EXPECTED, NOW)
    assert "cause" not in problem.details


def test_a_found_cause_is_added_and_the_command_still_spans_the_whole_gap() -> None:
    async def explain(client: Client, pool: Any, sid: str, **kw: Any) -> dict[str, Any]:
        return cause_of(
            "failed on attempt 2: boom",
            next_command(sid, EXPECTED, EXPECTED, paused=True),
        )

    found = run([overdue("nightly")], explain)
    details = found["nightly"].details
    assert details["cause"] == "failed on attempt 2: boom"
    assert details["cause_kind"] == "no-worker-polling"
    assert details["next_command"] == next_command("nightly", EXPECTED, NOW, paused=True)


def test_failures_no_temporal_and_other_kinds_leave_the_cause_out() -> None:
    calls: list[str] = []

    async def explain(client: Client, pool: Any, sid: str, **kw: Any) -> dict[str, Any]:
        calls.append(sid)
        raise RuntimeError("Temporal is down")

    lease = Problem("held", RUNNING_TOO_LONG, "s", {})
    assert run([overdue("a"), lease], explain) == {}
    assert calls == ["a"]  # a run that holds its lease too long is not a gap

    async def nobody() -> Client | None:
        return None

    assert run([overdue("a")], explain, client=nobody) == {}
    assert run([overdue("a")], explain, client=None) == {}
    assert calls == ["a"]


def test_a_pass_asks_at_most_its_cap_a_few_at_a_time_and_waits_at_most_its_deadline() -> None:
    in_flight = most = 0
    asked: list[str] = []

    async def explain(client: Client, pool: Any, sid: str, **kw: Any) -> dict[str, Any]:
        nonlocal in_flight, most
        asked.append(sid)
        in_flight += 1
        most = max(most, in_flight)
        try:
            if sid.startswith("slow"):
                await asyncio.Event().wait()  # Temporal never answers for this one
            await asyncio.sleep(0)
            return cause_of(f"cause of {sid}")
        finally:
            in_flight -= 1

    problems = [overdue("slow")] + [overdue(f"s{i:02d}") for i in range(30)]
    policy = CausePolicy(timeout=0.5, per_pass=12, concurrency=3)
    found = run(problems, explain, policy=policy)
    assert sorted(asked) == sorted(p.schedule_id for p in problems[:12]) and most <= 3
    assert sorted(found) == [f"s{i:02d}" for i in range(11)]  # the slow one is left out
    assert found["s03"].details["cause"] == "cause of s03"


def test_a_cause_without_a_command_keeps_the_rows() -> None:
    problem = caused(overdue("s"), cause_of("no worker polls the task queue 'q'"), now=NOW)
    assert problem.details["next_command"] == next_command("s", EXPECTED, NOW)


def test_a_fleet_incidents_members_are_not_asked_about_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    async def recorded(problems: list[Problem], **kw: Any) -> dict[str, Problem]:
        asked.extend(p.schedule_id for p in problems)
        return {}

    monkeypatch.setattr(passes, "with_causes", recorded)
    monitor = passes.Monitor(
        dsn="postgresql://unused",
        sinks={},
        options=passes.MonitorOptions(),
        pauses=PauseCheck(connected),
    )
    decided = Plan(open=[overdue("alone")], system=[overdue(f"m{i}") for i in range(5)])
    asyncio.run(monitor._with_causes(POOL, decided, now=NOW))
    assert asked == ["alone"]
