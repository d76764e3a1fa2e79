"""The soak's fault plan is drawn from its seed alone, and covers every kind of fault."""

from __future__ import annotations

import itertools

from tests.soak.plan import SERVER_KINDS, Fault, Kind, make_plan

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


def test_every_backfill_replays_the_window_a_pause_of_its_schedule_left() -> None:
    for seed in range(50):
        faults = plan(seed, 30.0)
        for backfill in (f for f in faults if f.kind is Kind.BACKFILL):
            pauses = [
                p
                for p in faults
                if p.kind is Kind.PAUSE
                and p.target == backfill.target
                and p.at + p.seconds < backfill.at
                and backfill.at - backfill.seconds <= p.at
            ]
            assert pauses, (seed, backfill)
