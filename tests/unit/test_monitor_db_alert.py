"""When the "cannot reach the database" alert pages, repeats and resolves, with explicit times."""

from __future__ import annotations

from pathlib import Path

from monitor.db_alert import AlertState, AlertStore, on_failure, on_healthy

EVERY = 900.0


def run(events: list[tuple[float, bool]]) -> list[str]:
    """Feed (time, database reachable) passes; what was sent, in order."""
    state, sent = AlertState(), []
    for now, healthy in events:
        if healthy:
            state, resolve = on_healthy(state)
            if resolve:
                sent.append("resolve")
        else:
            state, trigger = on_failure(state, now=now, every=EVERY)
            if trigger:
                sent.append("trigger")
    return sent


def test_an_outage_pages_at_once_repeats_every_period_and_resolves_once() -> None:
    passes = [(float(t), False) for t in range(0, 1900, 15)] + [(1900.0, True), (1915.0, True)]
    assert run(passes) == ["trigger", "trigger", "trigger", "resolve"]


def test_a_flapping_database_pages_once_per_period() -> None:
    flapping = [(float(t), t % 30 == 15) for t in range(0, 600, 15)]
    assert run(flapping) == ["trigger", "resolve"]


def test_an_outage_that_holds_pages_again_even_soon_after_the_last_one() -> None:
    passes = [(0.0, False), (15.0, True)] + [(30.0 + 15 * i, False) for i in range(3)]
    assert run(passes) == ["trigger", "resolve", "trigger"]


def test_a_new_outage_after_the_period_pages_at_once() -> None:
    assert run([(0.0, False), (15.0, True), (EVERY + 30, False)]) == [
        "trigger",
        "resolve",
        "trigger",
    ]


def test_the_state_survives_a_restart_through_its_file(tmp_path: Path) -> None:
    path = tmp_path / "alert.json"
    first = AlertStore(path)
    state, _ = on_failure(first.state, now=100.0, every=EVERY)
    first.save(state)
    restarted = AlertStore(path)
    assert restarted.state == state
    _, again = on_failure(restarted.state, now=160.0, every=EVERY)
    assert again is False


def test_an_unreadable_state_file_starts_afresh(tmp_path: Path) -> None:
    path = tmp_path / "alert.json"
    path.write_text("{not json")
    assert AlertStore(path).state == AlertState()
