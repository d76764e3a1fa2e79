"""How many attempts a run handed back by a stopping worker has left (workflows/hand_back.py)."""

from __future__ import annotations

from cronwarden.workflows.hand_back import (
    HANDED_BACK,
    WORKER_SHUTDOWN,
    attempts_spent,
    remaining_attempts,
)


def test_the_cut_attempt_is_not_spent_but_the_ones_that_failed_before_it_are() -> None:
    assert attempts_spent(HANDED_BACK, [1]) == 0
    assert attempts_spent(HANDED_BACK, [3]) == 2


def test_a_cut_reported_by_an_older_worker_counts_as_one_attempt_spent() -> None:
    # Its attempt is unknown: counting one keeps the run within its real attempts.
    assert attempts_spent(WORKER_SHUTDOWN, []) == 1
    assert attempts_spent(HANDED_BACK, []) == 1


def test_the_next_activity_always_has_an_attempt_and_unlimited_stays_unlimited() -> None:
    assert remaining_attempts(3, 0) == 3
    assert remaining_attempts(3, 2) == 1
    assert remaining_attempts(3, 5) == 1
    assert remaining_attempts(0, 4) == 0
