"""Connecting to Temporal, with failures turned into one sentence naming the address."""

from __future__ import annotations

import re
from pathlib import Path

from temporalio.client import Client
from temporalio.service import TLSConfig

from cronwarden.codec import data_converter
from cronwarden.config import Settings
from cronwarden.errors import InvalidInput, Unreachable


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read the Temporal {what} at {path}: {exc.strerror}") from exc


def tls_config(settings: Settings) -> TLSConfig | bool:
    # A certificate without its key (or the reverse) is refused when the settings load.
    if not (
        settings.temporal_tls
        or settings.temporal_tls_ca
        or settings.temporal_tls_cert
        or settings.temporal_api_key
    ):
        return False
    return TLSConfig(
        domain=settings.temporal_tls_server_name,
        server_root_ca_cert=_read(settings.temporal_tls_ca, "CA certificate")
        if settings.temporal_tls_ca
        else None,
        client_cert=_read(settings.temporal_tls_cert, "client certificate")
        if settings.temporal_tls_cert
        else None,
        client_private_key=_read(settings.temporal_tls_key, "client key")
        if settings.temporal_tls_key
        else None,
    )


def _plain_reason(text: str) -> str:
    """The human part of the SDK's connect error (it wraps the Rust transport's debug output)."""
    for pattern in (r'message: "([^"]+)"', r'error: "([^"]+)"'):
        match = re.search(pattern, text)
        if match:
            return match[1]
    return text.removeprefix("Failed client connect: ").strip()


async def connect(settings: Settings) -> Client:
    api_key = settings.temporal_api_key.get_secret_value() if settings.temporal_api_key else None
    try:
        return await Client.connect(
            settings.temporal_address,
            namespace=settings.namespace,
            tls=tls_config(settings),
            api_key=api_key,
            data_converter=data_converter(settings),
        )
    except RuntimeError as exc:
        # The SDK reports connection failures as RuntimeError("Failed client connect: ...").
        reason = _plain_reason(str(exc))
        raise Unreachable(
            f"cannot reach Temporal at {settings.temporal_address} "
            f"(namespace {settings.namespace}): {reason}"
        ) from exc
