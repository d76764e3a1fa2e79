from __future__ import annotations

from datetime import timedelta

import pytest

from cronwarden.schedules.durations import parse_duration
from cronwarden.times import format_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("15m", timedelta(minutes=15)),
        ("6h", timedelta(hours=6)),
        ("1d", timedelta(days=1)),
        ("90s", timedelta(seconds=90)),
        (" 2h ", timedelta(hours=2)),
    ],
)
def test_it_reads_a_whole_number_and_one_unit(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


def test_it_refuses_an_unknown_unit_naming_the_value() -> None:
    with pytest.raises(ValueError) as exc_info:
        parse_duration("15x")
    assert str(exc_info.value) == (
        "'15x' is not a duration: use a whole number followed by s, m, h or d "
        "(e.g. 30s, 15m, 6h, 1d)"
    )


def test_it_asks_for_a_unit_when_given_a_bare_number() -> None:
    with pytest.raises(ValueError) as exc_info:
        parse_duration("30")
    assert str(exc_info.value) == "'30' has no unit: add s, m, h or d (e.g. 30s or 30m)"


@pytest.mark.parametrize("text", ["1.5h", "1h30m", "-5m", "m", "", "5 m", "15M", "\u0661\u0665m"])
def test_it_refuses_anything_but_one_whole_number_and_a_unit(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


def test_it_refuses_zero() -> None:
    with pytest.raises(ValueError, match="'0s' is not a duration: it must be longer than zero"):
        parse_duration("0s")


def test_it_refuses_a_duration_too_long_for_timedelta() -> None:
    with pytest.raises(ValueError, match="too long"):
        parse_duration("99999999999999d")


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (90, "90s"),
        (60, "1m"),
        (3600, "1h"),
        (86400, "1d"),
        (5400, "90m"),
        (172800, "2d"),
        (0, "0s"),
    ],
)
def test_it_formats_the_shortest_exact_form(seconds: int, expected: str) -> None:
    assert format_duration(timedelta(seconds=seconds)) == expected


@pytest.mark.parametrize("text", ["45s", "90s", "15m", "36h", "7d"])
def test_a_formatted_duration_parses_back_to_itself(text: str) -> None:
    assert format_duration(parse_duration(text)) == text


def test_it_refuses_to_format_a_fraction_of_a_second() -> None:
    with pytest.raises(ValueError, match="fraction of a second"):
        format_duration(timedelta(milliseconds=1500))


def test_it_refuses_to_format_a_negative_duration() -> None:
    with pytest.raises(ValueError, match="negative"):
        format_duration(timedelta(seconds=-1))
