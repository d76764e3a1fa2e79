"""When the "cannot reach the database" alert pages, repeats and resolves, with explicit times."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cronwarden.monitor import db_alert
from cronwarden.monitor.db_alert import (
    AlertState,
    AlertStore,
    default_state_file,
    on_failure,
    on_healthy,
)

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


def test_a_state_file_of_another_boot_keeps_the_alert_open_but_not_its_clock_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The file followed the monitor to another node (or outlived a reboot): the monotonic
    # reading in it means nothing here. The alert is still owed its resolve; the next failure
    # pages rather than staying quiet on a stranger's clock.
    path = tmp_path / "alert.json"
    first = AlertStore(path)
    state, _ = on_failure(first.state, now=100.0, every=EVERY)
    first.save(state)
    monkeypatch.setattr(db_alert, "boot_id", lambda: "another-boot")
    moved = AlertStore(path)
    assert moved.state.open and moved.state.last_trigger_at is None
    _, again = on_failure(moved.state, now=160.0, every=EVERY)
    assert again is True
    assert on_healthy(moved.state)[1] is True


def test_an_unreadable_state_file_starts_afresh(tmp_path: Path) -> None:
    path = tmp_path / "alert.json"
    path.write_text("{not json")
    assert AlertStore(path).state == AlertState()


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("postgresql://cw:first@db:5432/cron", "postgresql://cw:second@db:5432/cron"),
        ("postgresql://cw@db/cron?password=first", "postgresql://cw@db/cron?password=second"),
        (
            "host=db user=cw password=first dbname=cron",
            "host=db user=cw password=second dbname=cron",
        ),
    ],
)
def test_the_state_file_is_named_for_the_database_not_its_password(one: str, other: str) -> None:
    # A digest that changes with the password is a digest of the password, in a directory
    # anyone can list.
    assert default_state_file(one) == default_state_file(other)
    assert default_state_file(one) != default_state_file(one.replace("cron", "other"))


def test_saving_never_writes_through_a_link_planted_at_a_guessable_name(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    path = tmp_path / "alert.json"
    # The name the state's temporary file once had: `.alert.json.<pid>`.
    (tmp_path / f".{path.name}.{os.getpid()}").symlink_to(victim)
    store = AlertStore(path)
    store.save(AlertState(open=True, last_trigger_at=1.0, failures=1))
    assert victim.read_text() == "untouched"
    assert AlertStore(path).state == AlertState(open=True, last_trigger_at=1.0, failures=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f".{path.name}.{os.getpid()}",
        "alert.json",
        "victim",
    ]
