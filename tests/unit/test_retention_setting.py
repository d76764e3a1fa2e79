"""CRONWARDEN_MONITOR_RETENTION is written like a schedule file's durations and is never so
short that a page's record goes before anyone could read it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from cronwarden.config import Settings, settings_error_message


def retention(monkeypatch: pytest.MonkeyPatch, value: str | None) -> timedelta:
    if value is not None:
        monkeypatch.setenv("CRONWARDEN_MONITOR_RETENTION", value)
    return Settings(_env_file=None).monitor_retention  # type: ignore[call-arg]


def test_the_default_keeps_ninety_days(monkeypatch: pytest.MonkeyPatch) -> None:
    assert retention(monkeypatch, None) == timedelta(days=90)


@pytest.mark.parametrize(("value", "kept"), [("30d", 30 * 86400), ("720h", 30 * 86400)])
def test_a_retention_is_a_duration(
    monkeypatch: pytest.MonkeyPatch, value: str, kept: float
) -> None:
    assert retention(monkeypatch, value).total_seconds() == kept


@pytest.mark.parametrize(
    ("value", "says"),
    [("2h", "at least 1d"), ("90", "has no unit"), ("P90D", "is not a duration")],
)
def test_a_bad_retention_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, says: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        retention(monkeypatch, value)
    message = settings_error_message(refused.value)
    assert message.startswith("CRONWARDEN_MONITOR_RETENTION: ") and says in message, message
