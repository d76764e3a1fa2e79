"""Connecting to Temporal, with failures turned into one sentence naming the address."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from temporalio.client import Client
from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)
from temporalio.service import TLSConfig

from cronwarden.codec import data_converter
from cronwarden.config import Settings
from cronwarden.errors import InvalidInput, Unreachable
from cronwarden.logs import get_logger

_core_logs_routed = False


class _CoreLogHandler(logging.Handler):
    """The SDK core's records as `temporal.core` events, through our own log pipeline."""

    def emit(self, record: logging.LogRecord) -> None:
        core = getattr(record, "temporal_log", None)
        get_logger("temporalio.core").log(
            record.levelno,
            "temporal.core",
            target=getattr(core, "target", None),
            message=getattr(core, "message", record.getMessage()),
            fields={k: str(v) for k, v in (getattr(core, "fields", None) or {}).items()},
        )


def route_core_logs() -> None:
    """Send the SDK core's log lines (gRPC retry warnings while Temporal is away, poller
    errors) to stderr as structured events.

    Left alone, the Rust core prints them, coloured, on *stdout*: a `--json` command whose
    server blipped mid-call would hand a script its JSON with warnings mixed in. Set before the
    first client exists, since every client and worker takes the default runtime at creation.
    """
    global _core_logs_routed
    if _core_logs_routed:
        return
    logger = logging.getLogger("temporalio.core")
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    logger.addHandler(_CoreLogHandler())
    runtime = Runtime(
        telemetry=TelemetryConfig(
            logging=LoggingConfig(
                filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
                forwarding=LogForwardingConfig(logger=logger),
            )
        )
    )
    Runtime.set_default(runtime, error_if_already_set=False)
    _core_logs_routed = True


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
    route_core_logs()
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
