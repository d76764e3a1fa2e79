"""The guarded run's Temporal heartbeats: each is a call to Temporal's server, so a run that is
done within the first pause (a no-op job takes milliseconds) must make none."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio import activity

from cronwarden.activities import guard


class _Stop(Exception):
    pass


async def test_the_first_heartbeat_waits_then_they_come_every_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[Any] = []

    async def sleep(seconds: float) -> None:
        events.append(("sleep", seconds))
        if len(events) >= 5:
            raise _Stop

    monkeypatch.setattr(asyncio, "sleep", sleep)
    monkeypatch.setattr(activity, "heartbeat", lambda *_: events.append("heartbeat"))
    with pytest.raises(_Stop):
        await guard._heartbeat_temporal()
    assert events == [
        ("sleep", guard.FIRST_TEMPORAL_HEARTBEAT_AFTER),
        "heartbeat",
        ("sleep", guard.TEMPORAL_HEARTBEAT_EVERY),
        "heartbeat",
        ("sleep", guard.TEMPORAL_HEARTBEAT_EVERY),
    ]
