from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from cronwarden.config import (
    FILE_SETTINGS,
    Settings,
    describe_dsn,
    dsn_password,
    dsn_url,
    redact_dsn,
    settings_error_message,
)
from cronwarden.errors import InvalidInput
from cronwarden.redact import MASK, redact
from cronwarden.temporal import _plain_reason


def test_a_dsn_password_is_never_shown() -> None:
    dsn = "postgresql://app:s3cret@db.internal:6432/ledger?sslmode=require"
    assert "s3cret" not in redact_dsn(dsn)
    assert redact_dsn(dsn).startswith("postgresql://app:***@db.internal:6432/ledger")
    assert describe_dsn(dsn) == "db.internal:6432/ledger"
    assert "s3cret" not in repr(Settings(database_url=dsn))  # type: ignore[arg-type]


def test_a_dsn_without_password_is_left_as_is() -> None:
    assert redact_dsn("postgresql://postgres@127.0.0.1:5432/x") == (
        "postgresql://postgres@127.0.0.1:5432/x"
    )


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONWARDEN_TEMPORAL_ADDRESS", "t:7000")
    monkeypatch.setenv("CRONWARDEN_JOBS", " a.jobs, b.jobs ,")
    monkeypatch.setenv("CRONWARDEN_MAX_CONCURRENT_RUNS", "4")
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.temporal_address == "t:7000"
    assert settings.job_modules() == ["a.jobs", "b.jobs"]
    assert settings.max_concurrent_runs == 4


def test_the_temporal_connect_error_is_reduced_to_its_human_part() -> None:
    raw = (
        "Failed client connect: Server connection error: tonic::transport::Error(Transport, "
        'ConnectError(ConnectError("tcp connect error", 127.0.0.1:1, Os { code: 111, kind: '
        'ConnectionRefused, message: "Connection refused" })))'
    )
    assert _plain_reason(raw) == "Connection refused"
    assert _plain_reason("Failed client connect: something else") == "something else"


def test_a_keyword_dsn_becomes_a_url_and_its_password_is_never_shown() -> None:
    dsn = "host=db.internal port=6432 user='app user' password='it\\'s s3cret' dbname=ledger"
    url = dsn_url(dsn)
    assert url.startswith("postgresql://app%20user:")
    assert url.endswith("@db.internal:6432/ledger")
    assert dsn_password(dsn) == "it's s3cret"
    assert "s3cret" not in redact_dsn(dsn) and "s3cret" not in describe_dsn(dsn)
    assert describe_dsn(dsn) == "db.internal:6432/ledger"


def test_a_query_password_is_never_shown() -> None:
    dsn = "postgresql://app@db/ledger?sslmode=require&password=s3cret"
    assert dsn_password(dsn) == "s3cret"
    assert "s3cret" not in redact_dsn(dsn) and "sslmode=require" in redact_dsn(dsn)


def test_every_secret_a_setting_carries_is_blanked_from_text() -> None:
    Settings(
        _env_file=None,  # type: ignore[call-arg]
        database_url="host=db password=kw-s3cret-1",  # type: ignore[arg-type]
        slack_webhook_url="https://hooks.slack.example/services/T0/B0/slack-s3cret-2",  # type: ignore[arg-type]
        temporal_api_key="key-s3cret-3",  # type: ignore[arg-type]
    )
    text = redact(
        "connect failed for password kw-s3cret-1; POST /services/T0/B0/slack-s3cret-2 failed; "
        "key key-s3cret-3"
    )
    assert "s3cret" not in text and text.count(MASK) == 3


def test_a_dsn_that_is_neither_form_is_refused_without_echoing_it() -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(_env_file=None, database_url="password=s3cret and then nonsense")  # type: ignore[call-arg,arg-type]
    message = settings_error_message(caught.value)
    assert "CRONWARDEN_DATABASE_URL" in message and "s3cret" not in message


def test_a_secret_file_wins_over_the_variable_and_loses_its_trailing_newline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = tmp_path / "database-url"
    url.write_text("postgresql://cronwarden_runtime:fr0m-file@db:5432/app\n")
    key = tmp_path / "api-key"
    key.write_text("  k3y-from-file\r\n")
    monkeypatch.setenv("CRONWARDEN_DATABASE_URL", "postgresql://stale:old@db:5432/app")
    monkeypatch.setenv("CRONWARDEN_DATABASE_URL_FILE", str(url))
    monkeypatch.setenv("CRONWARDEN_TEMPORAL_API_KEY_FILE", str(key))
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.dsn == "postgresql://cronwarden_runtime:fr0m-file@db:5432/app"
    assert settings.temporal_api_key is not None
    assert settings.temporal_api_key.get_secret_value() == "k3y-from-file"
    # Read from a file or not, a secret is blanked from whatever the process writes.
    assert redact("connecting with fr0m-file and k3y-from-file") == (
        f"connecting with {MASK} and {MASK}"
    )


@pytest.mark.parametrize("name", FILE_SETTINGS)
def test_every_secret_setting_may_come_from_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str
) -> None:
    value = "https://hooks.example.com/T0/B0/x" if name.endswith("_url") else "s3cret-value"
    if name == "database_url":
        value = "postgresql://u:p@db:5432/app"
    path = tmp_path / name
    path.write_text(value + "\n")
    monkeypatch.setenv(f"CRONWARDEN_{name.upper()}_FILE", str(path))
    field = getattr(Settings(_env_file=None), name)  # type: ignore[call-arg]
    assert field.get_secret_value() == value


def test_a_secret_file_that_cannot_be_read_is_one_sentence_naming_variable_and_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "not-mounted" / "runtime-url"
    monkeypatch.setenv("CRONWARDEN_DATABASE_URL_FILE", str(missing))
    with pytest.raises(InvalidInput) as raised:
        Settings(_env_file=None)  # type: ignore[call-arg]
    assert str(raised.value) == (
        f"invalid configuration: CRONWARDEN_DATABASE_URL_FILE names {missing}, which cannot "
        "be read (No such file or directory); is the Secret mounted there?"
    )


def test_an_empty_status_page_token_is_refused_rather_than_read_as_no_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    monkeypatch.setenv("CRONWARDEN_STATUS_PAGE_TOKEN_FILE", str(empty))
    with pytest.raises(ValidationError) as caught:
        Settings(_env_file=None)  # type: ignore[call-arg]
    assert "CRONWARDEN_STATUS_PAGE_TOKEN is empty" in settings_error_message(caught.value)


def test_the_status_page_takes_local_any_or_off_only() -> None:
    with pytest.raises(ValidationError):
        Settings(_env_file=None, status_page="public")  # type: ignore[call-arg,arg-type]
    assert Settings(_env_file=None).status_page == "local"  # type: ignore[call-arg]
