"""The lease protocol's model, explored exhaustively within its bounds: the full rules hold
every invariant, and each rule switched off yields a counterexample, printed as the shortest
trace of named steps (run with -s to see them)."""

from __future__ import annotations

import pytest

from tests.model.explorer import TWO_COMMITS, Exploration, explore
from tests.model.protocol import Bounds
from tests.model.statements import FULL, Rules

BOUNDS = Bounds()


def _report(title: str, found: Exploration) -> None:
    print(
        f"\n{title}: {found.states} states, {found.transitions} transitions, "
        f"{found.final_states} final, explored in {found.seconds:.1f}s ({BOUNDS})"
    )
    if found.counterexample is not None:
        print(found.counterexample.render())


def test_the_full_rules_hold_every_invariant_in_every_reachable_state() -> None:
    found = explore(FULL, BOUNDS)
    _report("full model", found)
    assert found.counterexample is None, found.counterexample.render()
    assert found.final_states > 0


@pytest.mark.parametrize(
    ("rules", "violation"),
    [
        pytest.param(Rules(priority=False), "live fire", id="without-priority"),
        pytest.param(Rules(fencing=False), "fenced-out holder", id="without-fencing"),
        pytest.param(Rules(outbox=False), TWO_COMMITS, id="without-outbox"),
    ],
)
def test_each_rule_removed_yields_a_counterexample(rules: Rules, violation: str) -> None:
    found = explore(rules, BOUNDS)
    _report(f"{rules}", found)
    assert found.counterexample is not None
    assert violation in found.counterexample.violation


def test_the_acquires_look_at_the_outbox_alone_is_not_what_keeps_a_key_from_two_commits() -> None:
    # The commit's INSERT is unique per key and rolls the job's writes back: without the
    # acquire's `done` rule a retry runs its job for nothing, but nothing lands twice.
    found = explore(Rules(done_at_acquire=False), BOUNDS)
    _report("without the acquire's done rule", found)
    assert found.counterexample is None, found.counterexample.render()
