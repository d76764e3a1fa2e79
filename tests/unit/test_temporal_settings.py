"""Temporal Cloud and secured-cluster settings: TLS, mTLS, API key, payload codec, health port."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError
from temporalio.service import TLSConfig

from cronwarden.codec import data_converter
from cronwarden.config import Settings, settings_error_message
from cronwarden.temporal import tls_config


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg, arg-type]


def refusal(**values: object) -> str:
    with pytest.raises(ValidationError) as caught:
        settings(**values)
    return settings_error_message(caught.value)


@pytest.fixture
def pem_files(tmp_path: Path) -> dict[str, Path]:
    files = {name: tmp_path / f"{name}.pem" for name in ("ca", "cert", "key")}
    for name, path in files.items():
        path.write_bytes(f"-----{name}-----\n".encode())
    return files


def test_a_plain_connection_has_no_tls() -> None:
    assert tls_config(settings()) is False


def test_ca_client_cert_key_and_server_name_become_the_tls_config(
    pem_files: dict[str, Path],
) -> None:
    tls = tls_config(
        settings(
            temporal_tls_ca=str(pem_files["ca"]),
            temporal_tls_cert=str(pem_files["cert"]),
            temporal_tls_key=str(pem_files["key"]),
            temporal_tls_server_name="frontend.temporal.internal",
        )
    )
    assert tls == TLSConfig(
        server_root_ca_cert=b"-----ca-----\n",
        client_cert=b"-----cert-----\n",
        client_private_key=b"-----key-----\n",
        domain="frontend.temporal.internal",
    )


@pytest.mark.parametrize(
    "values", [{"temporal_api_key": "k"}, {"temporal_tls": True}], ids=["api-key", "tls-flag"]
)
def test_an_api_key_or_the_tls_flag_turn_on_tls_with_the_system_roots(
    values: dict[str, object],
) -> None:
    assert tls_config(settings(**values)) == TLSConfig()


def test_the_settings_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, pem_files: dict[str, Path]
) -> None:
    monkeypatch.setenv("CRONWARDEN_TEMPORAL_TLS_CERT", str(pem_files["cert"]))
    monkeypatch.setenv("CRONWARDEN_TEMPORAL_TLS_KEY", str(pem_files["key"]))
    monkeypatch.setenv("CRONWARDEN_TEMPORAL_API_KEY", "secret-key")
    monkeypatch.setenv("CRONWARDEN_NAMESPACE", "acme-prod.a1b2c")
    monkeypatch.setenv("CRONWARDEN_HEALTH_PORT", "8080")
    loaded = settings()
    assert loaded.temporal_tls_cert == str(pem_files["cert"])
    assert loaded.namespace == "acme-prod.a1b2c"
    assert loaded.health_port == 8080
    assert "secret-key" not in repr(loaded)


def test_a_certificate_without_its_key_is_refused_and_so_is_a_key_without_its_certificate(
    pem_files: dict[str, Path],
) -> None:
    assert refusal(temporal_tls_cert=str(pem_files["cert"])) == (
        "CRONWARDEN_TEMPORAL_TLS_CERT is set but CRONWARDEN_TEMPORAL_TLS_KEY is not: "
        "mTLS needs both the client certificate and its key"
    )
    assert refusal(temporal_tls_key=str(pem_files["key"])) == (
        "CRONWARDEN_TEMPORAL_TLS_KEY is set but CRONWARDEN_TEMPORAL_TLS_CERT is not: "
        "mTLS needs both the client certificate and its key"
    )


def test_a_tls_file_that_does_not_exist_is_refused_naming_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "ca.pem"
    assert refusal(temporal_tls_ca=str(missing)) == (
        f"CRONWARDEN_TEMPORAL_TLS_CA names {missing}, which is not a file "
        "(is the Secret mounted there?)"
    )


def test_bad_health_port_and_codec_values_are_refused() -> None:
    assert refusal(health_port=70000).startswith("CRONWARDEN_HEALTH_PORT: ")
    assert refusal(payload_codec="mycodec") == (
        "CRONWARDEN_PAYLOAD_CODEC must be module:attribute, not 'mycodec'"
    )


def test_the_codec_is_off_unless_named() -> None:
    assert data_converter(settings()).payload_codec is None
    coded = data_converter(settings(payload_codec="tests.support.codecs:CompressingCodec"))
    assert type(coded.payload_codec).__name__ == "CompressingCodec"


def test_the_cli_refuses_inconsistent_tls_with_one_sentence_and_exit_2(
    pem_files: dict[str, Path],
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONWARDEN_")}
    result = subprocess.run(
        [sys.executable, "-m", "cronwarden", "worker"],
        env={**env, "CRONWARDEN_TEMPORAL_TLS_CERT": str(pem_files["cert"])},
        cwd=pem_files["cert"].parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: invalid configuration: CRONWARDEN_TEMPORAL_TLS_CERT is set but "
        "CRONWARDEN_TEMPORAL_TLS_KEY is not: mTLS needs both the client certificate and its key"
    )
