from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

import pytest

from cronwarden.backfill.window import Window, make_window, parse_instant, parse_since
from cronwarden.cli.backfill import _confirm
from cronwarden.errors import InvalidInput
from cronwarden.schedules.run_ids import replay_fire_time, scheduled_fire_time

NOW = datetime(2026, 11, 30, 4, 0, 30, 250_000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW),
        (" NOW ", NOW),
        ("-2h", NOW - timedelta(hours=2)),
        ("-90s", NOW - timedelta(seconds=90)),
        ("-7d", NOW - timedelta(days=7)),
        ("2026-11-29T10:00:00Z", datetime(2026, 11, 29, 10, tzinfo=UTC)),
        ("2026-11-29T12:00:00+02:00", datetime(2026, 11, 29, 10, tzinfo=UTC)),
        ("2026-11-29 10:00Z", datetime(2026, 11, 29, 10, tzinfo=UTC)),
    ],
)
def test_an_instant_is_now_relative_or_iso_with_a_zone(text: str, expected: datetime) -> None:
    value = parse_instant(text, now=NOW, what="--start")
    assert value == expected
    assert value.tzinfo == UTC


def test_an_iso_time_without_a_zone_is_refused_rather_than_guessed() -> None:
    with pytest.raises(InvalidInput) as exc_info:
        parse_instant("2026-11-29T10:00:00", now=NOW, what="--start")
    assert str(exc_info.value) == (
        "--start '2026-11-29T10:00:00' has no time zone: cronwarden works in UTC, write it "
        "with a Z (e.g. 2026-11-29T10:00:00Z)"
    )


@pytest.mark.parametrize("text", ["yesterday", "+2h", "-2x", "-", "2h"])
def test_an_unreadable_instant_names_the_option_and_the_value(text: str) -> None:
    with pytest.raises(InvalidInput) as exc_info:
        parse_instant(text, now=NOW, what="--end")
    assert str(exc_info.value).startswith(f"--end '{text}'")


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("-1000000d", "--start"),
        ("0001-01-01T00:00:00+01:00", "--start"),
        ("9999-12-31T23:00:00-05:00", "--end"),
    ],
)
def test_an_instant_outside_the_datetime_range_is_invalid_input(text: str, what: str) -> None:
    with pytest.raises(InvalidInput) as exc_info:
        parse_instant(text, now=NOW, what=what)
    assert str(exc_info.value).startswith(f"{what} '{text}' is out of range")


@pytest.mark.parametrize("text", ["100000000d", "-1000000d"])
def test_a_since_too_long_ago_is_invalid_input(text: str) -> None:
    with pytest.raises(InvalidInput, match=f"--since '{text}' is out of range"):
        parse_since(text, now=NOW)


def test_since_reads_a_bare_duration_as_that_long_ago() -> None:
    assert parse_since("7d", now=NOW) == NOW - timedelta(days=7)
    assert parse_since("-2h", now=NOW) == NOW - timedelta(hours=2)
    assert parse_since("2026-11-29T00:00:00Z", now=NOW) == datetime(2026, 11, 29, tzinfo=UTC)


def test_a_window_is_whole_seconds_inside_its_bounds() -> None:
    window = make_window(NOW - timedelta(hours=1), NOW, now=NOW)
    # The start rounds up and the end down: no second outside the asked window is planned.
    assert window.start == datetime(2026, 11, 30, 3, 0, 31, tzinfo=UTC)
    assert window.end == datetime(2026, 11, 30, 4, 0, 30, tzinfo=UTC)


def test_a_window_may_end_now_but_not_later() -> None:
    make_window(NOW - timedelta(hours=1), NOW, now=NOW)
    with pytest.raises(InvalidInput, match="ends in the future"):
        make_window(NOW - timedelta(hours=1), NOW + timedelta(seconds=1), now=NOW)


@pytest.mark.parametrize("end_offset", [timedelta(0), timedelta(seconds=-1)])
def test_a_window_whose_end_is_not_after_its_start_is_refused(end_offset: timedelta) -> None:
    start = NOW - timedelta(hours=1)
    with pytest.raises(InvalidInput, match="the window is empty"):
        make_window(start, start + end_offset, now=NOW)


def test_clamping_to_creation_keeps_only_fires_strictly_after_it() -> None:
    window = Window(datetime(2026, 11, 30, 3, tzinfo=UTC), datetime(2026, 11, 30, 4, tzinfo=UTC))
    created = datetime(2026, 11, 30, 3, 30, 0, 400_000, tzinfo=UTC)
    assert window.clamped_to(created).start == datetime(2026, 11, 30, 3, 30, 1, tzinfo=UTC)
    on_the_second = datetime(2026, 11, 30, 3, 30, tzinfo=UTC)
    assert window.clamped_to(on_the_second).start == datetime(2026, 11, 30, 3, 30, 1, tzinfo=UTC)
    assert window.clamped_to(window.start - timedelta(days=1)) == window
    assert window.clamped_to(window.end + timedelta(hours=1)).empty


FOUR = datetime(2026, 11, 30, 4, tzinfo=UTC)


@pytest.mark.parametrize(
    ("workflow_id", "scheduled", "replay"),
    [
        ("nightly-2026-11-30T04:00:00Z", FOUR, None),
        ("nightly~replay-2026-11-30T04:00:00Z", None, FOUR),
        # A run of schedule `nightly-eu`, and ids with something after the time.
        ("nightly-eu-2026-11-30T04:00:00Z", None, None),
        ("nightly~replay-2026-11-30T04:00:00Z-abc", None, None),
        ("nightly-2026-11-30T04:00:00Z-abc", None, None),
        ("nightly-eu~replay-2026-11-30T04:00:00Z", None, None),
        ("other-2026-11-30T04:00:00Z", None, None),
        ("other~replay-2026-11-30T04:00:00Z", None, None),
        ("nightly-2026-11-30T04:00:00.5Z", None, None),
        # The old replay form is a scheduled run of schedule `nightly-replay`, not a replay.
        ("nightly-replay-2026-11-30T04:00:00Z", None, None),
    ],
)
def test_a_run_workflow_id_names_its_fire_time_only_in_its_exact_form(
    workflow_id: str, scheduled: datetime | None, replay: datetime | None
) -> None:
    assert scheduled_fire_time("nightly", workflow_id) == scheduled
    assert replay_fire_time("nightly", workflow_id) == replay


def test_a_schedule_whose_id_extends_another_is_not_taken_for_its_replays() -> None:
    # Schedule `nightly-replay`'s own runs are its scheduled runs, never replays of `nightly`.
    assert scheduled_fire_time("nightly-replay", "nightly-replay-2026-11-30T04:00:00Z") == FOUR
    assert scheduled_fire_time("nightly", "nightly-replay-2026-11-30T04:00:00Z") is None
    assert replay_fire_time("nightly", "nightly-replay-2026-11-30T04:00:00Z") is None
    assert replay_fire_time("nightly-replay", "nightly-replay-2026-11-30T04:00:00Z") is None


def test_more_than_a_hundred_keys_need_yes_when_nobody_can_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Nobody at a terminal, whatever stdin the test runs with (`pytest -s` in a terminal).
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    _confirm(100, yes=False)
    _confirm(5000, yes=True)
    with pytest.raises(InvalidInput, match="pass --yes"):
        _confirm(101, yes=False)


def test_window_errors_print_times_in_whole_seconds() -> None:
    now = datetime(2026, 11, 30, 4, 0, 30, 123_456, tzinfo=UTC)
    with pytest.raises(InvalidInput) as empty:
        make_window(now, now, now=now)
    assert str(empty.value) == (
        "the window is empty: its end (2026-11-30T04:00:30Z) is not after its start "
        "(2026-11-30T04:00:30Z)"
    )
    with pytest.raises(InvalidInput) as future:
        make_window(now - timedelta(hours=1), now + timedelta(seconds=1), now=now)
    assert "(2026-11-30T04:00:31Z, now is 2026-11-30T04:00:30Z)" in str(future.value)
