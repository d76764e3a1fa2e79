"""Scenario 10: a worker cut off from Temporal but not from Postgres, on a run's last attempt.

The worker reaches Temporal through a TCP proxy the test switches off. Temporal stops hearing the
attempt's heartbeats, times it out and, the attempt being the run's last, fails the run. Nothing
tells the worker: the SDK cancels an activity only when a heartbeat comes back refused, and none
comes back. Left alone, the attempt would go on to commit a key whose run has failed (the
schedule paused on failure, a page sent, backfill listing the key), or keep its place in the
lease's queue, ahead of live runs, for the whole of its wait.

A second worker, connected directly, is started after the cut: the run's workflow needs a worker
to record its failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import WorkflowFailureError

from cronwarden.embedded import EmbeddedTemporal
from cronwarden.store import locks
from tests.support.database import fetch
from tests.support.faults.one_key import OneKey
from tests.support.faults.worker_process import StartWorker, WorkerProcess
from tests.support.runs import lock_holder
from tests.support.switch_proxy import SwitchProxy
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

# The run's heartbeat timeout is min(10 s, its timeout): Temporal fails the run about 10 s after
# the cut, and the generous bound leaves room for a loaded machine.
RUN_FAILED_WITHIN = 60


class TcpSwitch(SwitchProxy):
    """The switchable proxy, carrying any TCP (gRPC here) without reading it."""

    def _observers(self) -> tuple[Callable[[bytes], None] | None, Callable[[bytes], None] | None]:
        return None, None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._port}"


@pytest_asyncio.fixture(loop_scope="session")
async def cut_off_worker(
    temporal_server: EmbeddedTemporal, start_worker: StartWorker
) -> AsyncIterator[tuple[TcpSwitch, WorkerProcess]]:
    """A worker whose every connection to Temporal goes through a switch."""
    switch = TcpSwitch(temporal_server.host, temporal_server.port)
    await switch.start()
    worker = start_worker(CRONWARDEN_TEMPORAL_ADDRESS=switch.address)
    await worker.wait_event("worker.started", timeout=60)
    yield switch, worker
    await switch.stop()


@pytest.mark.parametrize("reconnected", [False, True], ids=["still-cut-off", "reconnected"])
async def test_a_last_attempt_temporal_gave_up_on_never_commits(
    one_key: OneKey,
    cut_off_worker: tuple[TcpSwitch, WorkerProcess],
    start_worker: StartWorker,
    tmp_path: Path,
    reconnected: bool,
) -> None:
    switch, worker = cut_off_worker
    gate = tmp_path / "gate"
    handle = await one_key.start(
        job="gated", args={"gate": str(gate)}, max_attempts=1, timeout=60, lock_ttl=30
    )
    await worker.wait_event("run.started", timeout=60)
    await switch.off()
    start_worker()
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), RUN_FAILED_WITHIN)
    if reconnected:
        # Temporal can be asked again, and answers that the run is over. Its answer to the
        # worker's next heartbeat says so too, and the SDK cancels the attempt: whichever comes
        # first ends it, the commit's question or the cancellation.
        await switch.on()
    gate.touch()

    async def ended() -> list[str]:
        return [
            e["event"]
            for e in worker.events()
            if e.get("event") in ("run.abandoned-by-temporal", "run.cancelled", "run.committed")
        ]

    endings = await wait_for(ended, timeout=30, what="the cut-off attempt to end")
    if reconnected:
        assert endings[0] in ("run.abandoned-by-temporal", "run.cancelled")
    else:
        assert endings == ["run.abandoned-by-temporal"]
        [abandoned] = worker.events("run.abandoned-by-temporal")
        assert abandoned["where"] == "about to commit"
    assert await one_key.committed_attempts() == []
    assert await one_key.effect_attempts() == []
    assert await lock_holder(one_key.pool, f"schedule:{one_key.schedule_id}") is None


async def test_a_queued_last_attempt_temporal_gave_up_on_leaves_the_queue(
    one_key: OneKey, cut_off_worker: tuple[TcpSwitch, WorkerProcess], start_worker: StartWorker
) -> None:
    switch, worker = cut_off_worker
    lease = f"schedule:{one_key.schedule_id}"
    async with one_key.pool.acquire() as conn:
        held = await locks.acquire(
            conn, name=lease, holder="other", ttl_seconds=600, logical_key="other@x"
        )
    assert held.token is not None
    # buffer_one waits for whoever holds the lease, here for up to its whole timeout.
    handle = await one_key.start(overlap="buffer_one", max_attempts=1, timeout=300)

    async def places() -> list[str]:
        rows = await fetch(
            one_key.pool, "SELECT waiter FROM cronwarden.lock_waiters WHERE name = $1", lease
        )
        return [r["waiter"] for r in rows]

    await wait_for(places, timeout=60, what="the run queued at the lease")
    await switch.off()
    start_worker()
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), RUN_FAILED_WITHIN)

    async def left() -> bool:
        return await places() == []

    # Its place would otherwise be refreshed for the rest of its 300 s wait.
    await wait_for(left, timeout=30, what="the abandoned attempt to leave the queue")
    abandoned = await worker.wait_event("run.abandoned-by-temporal", timeout=30)
    assert abandoned["where"] == "queued for the lease"
    assert await one_key.committed_attempts() == []
