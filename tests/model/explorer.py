"""Breadth-first exploration of every state the model reaches, checking the invariants.

Breadth first, so the first violation found has a shortest trace, which is what a reader
wants. Checked:

- at most one commit per logical key (state);
- no write of a fenced-out holder lands (the commit step);
- no live fire waits behind a replay that was not holding the lease when it came: a replay
  never takes the lease while a live fire holds a place in line, and a live fire is never
  refused a free lease for a replay in line (the acquire step);
- no deadlock: every state that is not final has a step;
- progress: from every state, a final state is reachable by steps that are not faults
  (backward reachability from the final states over the explored graph).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tests.model.protocol import Bounds, Step, describe, successors
from tests.model.state import State, canonical, initial_state, is_final
from tests.model.statements import FULL, Result, Rules

TWO_COMMITS = "a logical key committed twice"
DEADLOCK = "deadlock: a state that is not final has no step"
NO_PROGRESS = "no final state is reachable from here once faults stop"


@dataclass(frozen=True)
class Counterexample:
    violation: str
    trace: tuple[tuple[Step, Result], ...]

    def render(self) -> str:
        lines = [
            f"{n:>2}. {describe(step, result)}" for n, (step, result) in enumerate(self.trace, 1)
        ]
        return "\n".join([*lines, f"    violated: {self.violation}"])


@dataclass(frozen=True)
class Exploration:
    states: int
    transitions: int
    final_states: int
    seconds: float
    counterexample: Counterexample | None


def explore(rules: Rules = FULL, bounds: Bounds | None = None) -> Exploration:
    bounds = bounds or Bounds()
    started = time.perf_counter()
    start = canonical(initial_state(bounds.workers))
    ids: dict[State, int] = {start: 0}
    states = [start]
    parent = [-1]
    via: list[tuple[Step, Result] | None] = [None]
    # Predecessors over steps that are not faults: the progress check walks them backwards.
    calm_predecessors: list[list[int]] = [[]]
    finals: list[int] = []
    transitions = 0

    def found(at: int, violation: str, last: tuple[Step, Result] | None = None) -> Exploration:
        trace = _trace(parent, via, at) + ((last,) if last is not None else ())
        return Exploration(
            len(states),
            transitions,
            len(finals),
            time.perf_counter() - started,
            Counterexample(violation, trace),
        )

    at = 0
    while at < len(states):
        state = states[at]
        if max(state.effects) > 1:
            return found(at, TWO_COMMITS)
        steps = successors(state, rules, bounds)
        transitions += len(steps)
        if is_final(state):
            finals.append(at)
        elif not steps:
            return found(at, DEADLOCK)
        for step in steps:
            if step.violation is not None:
                return found(at, step.violation, (step.step, step.result))
            to = ids.get(step.state)
            if to is None:
                to = len(states)
                ids[step.state] = to
                states.append(step.state)
                parent.append(at)
                via.append((step.step, step.result))
                calm_predecessors.append([])
            if not step.step.fault:
                calm_predecessors[to].append(at)
        at += 1

    reaches_final = bytearray(len(states))
    for final in finals:
        reaches_final[final] = 1
    pending = list(finals)
    while pending:
        for before in calm_predecessors[pending.pop()]:
            if not reaches_final[before]:
                reaches_final[before] = 1
                pending.append(before)
    # The first in breadth-first order: its trace is a shortest one.
    stuck = reaches_final.find(0)
    if stuck >= 0:
        return found(stuck, NO_PROGRESS)
    return Exploration(len(states), transitions, len(finals), time.perf_counter() - started, None)


def _trace(
    parent: list[int], via: list[tuple[Step, Result] | None], at: int
) -> tuple[tuple[Step, Result], ...]:
    steps: list[tuple[Step, Result]] = []
    while at > 0:
        came = via[at]
        assert came is not None
        steps.append(came)
        at = parent[at]
    return tuple(reversed(steps))
