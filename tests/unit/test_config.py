from __future__ import annotations

import pytest

from cronwarden.config import Settings, describe_dsn, redact_dsn
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
