"""The soak's fault plan is drawn from its seed alone, and covers every kind of fault."""

from __future__ import annotations

import itertools

from tests.soak.plan import BACKFILL_LAG, SERVER_KINDS, Fault, Kind, make_plan

WORKERS = ["w1", "w2", "w3"]
SCHEDULES = ["a", "b", "c"]
TTL = 5.0


def plan(seed: int, duration: float = 180.0) -> list[Fault]:
    return make_plan(seed, duration, workers=WORKERS, schedules=SCHEDULES, lock_ttl=TTL)


def test_the_same_seed_draws_the_same_plan_and_another_seed_another() -> None:
    assert plan(123) == plan(123)
    assert plan(123) != plan(124)


def test_every_kind_of_fault_happens_even_in_the_quick_form() -> None:
    for seed in range(50):
        for duration in (30.0, 180.0):
            assert {f.kind for f in plan(seed, duration)} == set(Kind), (seed, duration)


def test_faults_start_in_order_inside_the_run_and_target_what_exists() -> None:
    for seed in range(50):
        faults = plan(seed)
        assert [f.at for f in faults] == sorted(f.at for f in faults)
        assert all(0 < f.at < 180 for f in faults)
        for f in faults:
            if f.kind in (Kind.KILL, Kind.STOP):
                assert f.target in WORKERS
            elif f.kind in SERVER_KINDS:
                assert f.target is None
            else:
                assert f.target in SCHEDULES


def test_a_stopped_worker_stays_stopped_past_its_lease() -> None:
    stops = [f for seed in range(50) for f in plan(seed) if f.kind is Kind.STOP]
    assert stops and all(f.seconds > TTL for f in stops)


def test_two_servers_are_never_down_at_once() -> None:
    for seed in range(50):
        restarts = [f for f in plan(seed) if f.kind in SERVER_KINDS]
        for before, after in itertools.pairwise(restarts):
            assert after.at >= before.at + before.seconds, (seed, before, after)


def covered_pauses(faults: list[Fault], backfill: Fault) -> list[Fault]:
    """Pauses of the backfill's schedule over before it starts, inside its window (which ends
    a few seconds before its start)."""
    return [
        p
        for p in faults
        if p.kind is Kind.PAUSE
        and p.target == backfill.target
        and p.at + p.seconds + BACKFILL_LAG <= backfill.at
        and backfill.at - BACKFILL_LAG - backfill.seconds <= p.at
    ]


def test_the_first_backfill_replays_the_window_a_pause_of_its_schedule_left() -> None:
    for seed in range(50):
        for duration in (30.0, 180.0):
            faults = plan(seed, duration)
            first = next(f for f in faults if f.kind is Kind.BACKFILL)
            assert covered_pauses(faults, first), (seed, duration, first)


def test_a_later_backfill_of_a_paused_schedule_covers_that_pause_too() -> None:
    seen = 0
    for seed in range(50):
        faults = plan(seed)
        backfills = [f for f in faults if f.kind is Kind.BACKFILL][1:]
        for backfill in backfills:
            paused_before = [
                p
                for p in faults
                if p.kind is Kind.PAUSE and p.target == backfill.target and p.at < backfill.at
            ]
            if paused_before:
                seen += 1
                assert covered_pauses(faults, backfill), (seed, backfill)
    assert seen
