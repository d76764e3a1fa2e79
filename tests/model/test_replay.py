"""Random walks of the model replayed on the real statements: after every step, what Postgres
answered and what it holds (lease, queue, outbox, the job's writes) is what the model said."""

from __future__ import annotations

import random
import time

import asyncpg
import pytest

from tests.model.protocol import Bounds, Step, Transition, describe, successors
from tests.model.real import RealLease
from tests.model.state import canonical, initial_state, is_final
from tests.model.statements import FULL, Acquired, Result

pytestmark = pytest.mark.integration

WALKS = 240
LONGEST = 40
# Walks need not cover everything, so they may take more faults than the explorer does.
BOUNDS = Bounds(faults=4)


def walk(seed: int) -> list[Transition]:
    """A seeded random walk of the full model, until a final state or LONGEST steps."""
    rng = random.Random(seed)
    state = canonical(initial_state(BOUNDS.workers))
    taken: list[Transition] = []
    while len(taken) < LONGEST and not is_final(state):
        steps = successors(state, FULL, BOUNDS)
        if not steps:
            break
        step = rng.choice(steps)
        taken.append(step)
        state = step.state
    return taken


def _same(step: Step, model: Result, real: Result) -> bool:
    if isinstance(model, Acquired) and isinstance(real, Acquired):
        # Tokens are numbered apart: taken or not is what both must agree on.
        return model._replace(token=model.token >= 0) == real._replace(token=real.token >= 0)
    return model == real


async def test_random_walks_of_the_model_match_the_real_statements(pool: asyncpg.Pool) -> None:
    started = time.perf_counter()
    steps = 0
    async with pool.acquire() as environment:
        workers = [await pool.acquire() for _ in range(BOUNDS.workers)]
        try:
            for seed in range(WALKS):
                real = RealLease(workers, environment, tag=f"walk{seed}")
                trace: list[str] = []
                for taken in walk(seed):
                    answer = await real.run(taken.step)
                    trace.append(f"{len(trace) + 1:>2}. {describe(taken.step, taken.result)}")
                    assert _same(taken.step, taken.result, answer), (
                        f"walk {seed}: the database answered {answer}, the model "
                        f"{taken.result}:\n" + "\n".join(trace)
                    )
                    differences = await real.differences(taken.state)
                    assert not differences, f"walk {seed}: {differences}:\n" + "\n".join(trace)
                    steps += 1
        finally:
            for conn in workers:
                await pool.release(conn)
    seconds = time.perf_counter() - started
    print(f"\n{WALKS} walks, {steps} steps replayed on Postgres in {seconds:.1f}s")
