"""The pause check looks up a bounded share of the paused schedules per pass, in turn."""

from __future__ import annotations

from typing import Any, cast

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from cronwarden.monitor.pauses import PauseCheck, PauseCheckPolicy


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


class _Handle:
    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id

    async def describe(self) -> Any:
        # The Temporal edge: one id is refused on its own, the others are gone (NOT_FOUND).
        if self.schedule_id == "refused":
            raise RPCError("no", RPCStatusCode.PERMISSION_DENIED, b"")
        raise RPCError("gone", RPCStatusCode.NOT_FOUND, b"")


class _Client:
    def get_schedule_handle(self, schedule_id: str) -> _Handle:
        return _Handle(schedule_id)


async def test_one_schedule_temporal_refuses_leaves_only_its_own_pause_unverified() -> None:
    async def connect() -> Client:
        return cast(Client, _Client())

    check = PauseCheck(connect)
    rows: list[dict[str, Any]] = [{"schedule_id": s} for s in ("a", "refused", "z")]
    assert await check.lifts(rows) == []
    assert check.unverified == ["refused"]
    assert check.reachable
