"""The pause check looks up a bounded share of the paused schedules per pass, in turn."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client

from monitor.pauses import PauseCheck, PauseCheckPolicy


async def _never() -> Client:
    raise AssertionError("not connected in this test")


def test_many_paused_schedules_are_looked_up_a_batch_per_pass_in_turn() -> None:
    check = PauseCheck(_never, PauseCheckPolicy(batch=2))
    rows: list[dict[str, Any]] = [{"schedule_id": s} for s in "edcba"]
    turns = [[r["schedule_id"] for r in check.share(rows)] for _ in range(4)]
    assert turns == [["a", "b"], ["c", "d"], ["e", "a"], ["b", "c"]]


def test_few_paused_schedules_are_all_looked_up_every_pass() -> None:
    check = PauseCheck(_never, PauseCheckPolicy(batch=5))
    rows: list[dict[str, Any]] = [{"schedule_id": s} for s in "ba"]
    assert [[r["schedule_id"] for r in check.share(rows)] for _ in range(2)] == [["a", "b"]] * 2
