"""RunSlots: one budget of runs for every Temporal Worker of a worker process."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any

from temporalio.worker import SlotPermit

from cronwarden.worker_slots import RunSlots


@dataclass
class Context:
    """What the SDK hands the supplier (only the permit is read)."""

    permit: SlotPermit
    slot_info: Any = None
    task_queue: str = "tq/job/x"


async def delivered(slots: RunSlots) -> SlotPermit:
    """A reservation a task arrived on, as the SDK does it: reserve, then mark used."""
    permit = await slots.reserve_slot(Context(SlotPermit()))  # type: ignore[arg-type]
    slots.mark_slot_used(Context(permit))  # type: ignore[arg-type]
    return permit


async def test_idle_pollers_on_more_queues_than_slots_all_get_to_poll() -> None:
    # A reservation is what an idle long poll holds: counted, five queues would starve three.
    slots = RunSlots(2)
    reservations = [
        await asyncio.wait_for(slots.reserve_slot(Context(SlotPermit())), 1)  # type: ignore[arg-type]
        for _ in range(5)
    ]
    assert len(reservations) == 5
    assert slots.delivered == 0


async def test_a_saturated_process_stops_polling_until_a_run_ends() -> None:
    slots = RunSlots(2)
    first = await delivered(slots)
    await delivered(slots)
    assert slots.try_reserve_slot(Context(SlotPermit())) is None  # type: ignore[arg-type]
    waiting = asyncio.ensure_future(slots.reserve_slot(Context(SlotPermit())))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert not waiting.done()
    # The SDK releases from its own thread.
    release = threading.Thread(target=slots.release_slot, args=(Context(first),))
    release.start()
    release.join()
    await asyncio.wait_for(waiting, 1)
    assert slots.delivered == 1


async def test_a_poll_that_ended_without_a_task_gives_nothing_back() -> None:
    slots = RunSlots(1)
    idle = await slots.reserve_slot(Context(SlotPermit()))  # type: ignore[arg-type]
    await delivered(slots)
    slots.release_slot(Context(idle))  # type: ignore[arg-type]
    assert slots.delivered == 1


async def test_no_more_runs_than_the_limit_even_when_more_tasks_arrived() -> None:
    # Pollers already polling may each receive a task at once: the run slots hold the bound.
    slots = RunSlots(2)
    running = 0
    most = 0
    release = asyncio.Event()

    async def run() -> None:
        nonlocal running, most
        async with slots.running(lambda: None):
            running += 1
            most = max(most, running)
            await release.wait()
            running -= 1

    tasks = [asyncio.ensure_future(run()) for _ in range(4)]
    await asyncio.sleep(0.05)
    assert (running, most) == (2, 2)
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert most == 2


async def test_a_run_cancelled_while_waiting_for_a_slot_takes_none() -> None:
    slots = RunSlots(1)
    hold = asyncio.Event()

    async def run() -> None:
        async with slots.running(lambda: None):
            await hold.wait()

    holder = asyncio.ensure_future(run())
    await asyncio.sleep(0.01)
    waiter = asyncio.ensure_future(run())
    await asyncio.sleep(0.01)
    waiter.cancel()
    hold.set()
    await holder
    # The slot came back: another run gets it at once.
    await asyncio.wait_for(run(), 1)
