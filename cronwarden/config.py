"""Settings from the environment (and `.env`), shared by every command."""

from __future__ import annotations

from pathlib import Path
from typing import Self
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_TASK_QUEUE = "cronwarden"
DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/cronwarden"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="CRONWARDEN_", env_file=".env", extra="ignore", frozen=True
    )

    temporal_address: str = "localhost:7233"
    """host:port of the Temporal frontend."""
    namespace: str = "default"
    """Temporal namespace holding the schedules and runs."""
    task_queue: str = DEFAULT_TASK_QUEUE
    """Task queue the schedules start runs on and the workers poll."""
    database_url: SecretStr = SecretStr(DEFAULT_DATABASE_URL)
    """Postgres DSN. Secret because it may carry a password; print it with `redact_dsn`."""
    jobs: str = ""
    """Comma-separated module paths whose import registers the jobs (`@job`)."""
    temporal_tls_ca: str | None = None
    """Path to the CA bundle that signs the Temporal frontend's certificate."""
    temporal_tls_cert: str | None = None
    """Path to the mTLS client certificate."""
    temporal_tls_key: str | None = None
    """Path to the mTLS client key."""
    temporal_api_key: SecretStr | None = None
    """API key for Temporal Cloud (implies TLS)."""
    temporal_tls: bool = False
    """TLS with the system's CA roots, for a secured cluster that needs no CA file, client
    certificate or API key (any of those turns TLS on by itself)."""
    temporal_tls_server_name: str | None = None
    """Server name to verify the frontend's certificate against, when it differs from the
    address's host (a proxy, an IP address)."""
    payload_codec: str | None = None
    """`module:attribute` naming a temporalio `PayloadCodec` (or a zero-argument factory of one)
    that encodes every payload: encryption at rest in Temporal. Workers, the CLI and anything
    else that reads the runs must share it."""
    health_port: int | None = Field(default=None, ge=1, le=65535)
    """Port of the worker's /healthz and /readyz endpoints; unset serves none."""
    graceful_shutdown_seconds: float = Field(default=30.0, ge=0)
    """How long a stopping worker lets in-flight runs finish before cancelling them."""
    max_concurrent_runs: int = Field(default=10, ge=1, le=1000)
    """Runs one worker executes at once. Each may hold two Postgres connections (its commit
    transaction and a lease renewal), so the worker's pool holds twice this, plus two."""

    # The absence monitor (`cronwarden monitor`). Every URL that may carry a token is secret.
    alert_webhook_url: SecretStr | None = None
    """Generic webhook sink: pages POSTed as JSON."""
    alert_webhook_secret: SecretStr | None = None
    """When set, webhook bodies are signed: `X-Cronwarden-Signature: sha256=<HMAC-SHA256 hex>`."""
    slack_webhook_url: SecretStr | None = None
    """Slack incoming-webhook URL (the URL is the credential)."""
    pagerduty_routing_key: SecretStr | None = None
    """PagerDuty Events API v2 integration (routing) key."""
    pagerduty_url: str = "https://events.pagerduty.com/v2/enqueue"
    """PagerDuty Events API v2 endpoint (tests point it at a local server)."""
    monitor_ping_url: SecretStr | None = None
    """Dead-man's switch pinged (GET) after every monitor pass that reached the database."""
    monitor_system_min_schedules: int = Field(default=3, ge=1)
    """A system page needs at least this many schedules going overdue in one pass …"""
    monitor_system_ratio: float = Field(default=0.5, gt=0, le=1)
    """… and at least this share of the watched (unpaused) schedules."""
    monitor_send_timeout_seconds: float = Field(default=10.0, gt=0)
    """Timeout of one delivery (or ping) HTTP request."""
    monitor_retry_base_seconds: float = Field(default=5.0, gt=0)
    """First retry delay of a failed delivery; doubles per attempt."""
    monitor_retry_max_seconds: float = Field(default=300.0, gt=0)
    """Longest delay between two delivery attempts."""
    monitor_db_alert_every_seconds: float = Field(default=900.0, gt=0)
    """While the database is unreachable, the direct "cannot reach the database" alert repeats
    at most this often."""
    monitor_database_timeout_seconds: float = Field(default=30.0, gt=0)
    """A monitor pass whose database work takes longer counts as "cannot reach the database"."""

    @model_validator(mode="after")
    def _temporal_tls_is_consistent(self) -> Self:
        if bool(self.temporal_tls_cert) != bool(self.temporal_tls_key):
            given, missing = ("CERT", "KEY") if self.temporal_tls_cert else ("KEY", "CERT")
            raise ValueError(
                f"CRONWARDEN_TEMPORAL_TLS_{given} is set but CRONWARDEN_TEMPORAL_TLS_{missing} "
                "is not: mTLS needs both the client certificate and its key"
            )
        for suffix, path in (
            ("CA", self.temporal_tls_ca),
            ("CERT", self.temporal_tls_cert),
            ("KEY", self.temporal_tls_key),
        ):
            if path and not Path(path).is_file():
                raise ValueError(
                    f"CRONWARDEN_TEMPORAL_TLS_{suffix} names {path}, which is not a file "
                    "(is the Secret mounted there?)"
                )
        # A sink or ping URL is checked here, once, and never echoed: it may be a secret (a
        # Slack webhook URL is one), and a URL urllib cannot use would otherwise fail every send.
        for name, url in (
            ("ALERT_WEBHOOK_URL", self.alert_webhook_url),
            ("SLACK_WEBHOOK_URL", self.slack_webhook_url),
            ("MONITOR_PING_URL", self.monitor_ping_url),
            ("PAGERDUTY_URL", SecretStr(self.pagerduty_url)),
        ):
            if url is not None and not _is_http_url(url.get_secret_value()):
                raise ValueError(
                    f"CRONWARDEN_{name} must be an http:// or https:// URL with a host "
                    "(its value is not shown: it may carry a token)"
                )
        if self.payload_codec is not None:
            module, _, attr = self.payload_codec.partition(":")
            if not module.strip() or not attr.strip():
                raise ValueError(
                    f"CRONWARDEN_PAYLOAD_CODEC must be module:attribute, not {self.payload_codec!r}"
                )
        return self

    @property
    def dsn(self) -> str:
        return self.database_url.get_secret_value()

    def job_modules(self) -> list[str]:
        return [m.strip() for m in self.jobs.split(",") if m.strip()]


def _is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def settings_error_message(exc: ValidationError) -> str:
    """pydantic's report as one line per problem, naming the variable and never echoing a value
    (it may be a secret)."""
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["loc"]:
            field = "_".join(str(part) for part in error["loc"]).upper()
            message = f"CRONWARDEN_{field}: {message}"
        problems.append(message)
    return "; ".join(problems)


def redact_dsn(dsn: str) -> str:
    """The DSN with any password replaced, safe for logs and error messages."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "<unparseable DSN>"
    if parts.password is None:
        return dsn
    netloc = parts.netloc.rsplit("@", 1)
    user = parts.username or ""
    redacted = f"{user}:***@{netloc[-1]}" if len(netloc) == 2 else parts.netloc
    return urlunsplit(parts._replace(netloc=redacted))


def describe_dsn(dsn: str) -> str:
    """Where a DSN points, for a one-sentence error: host:port/database (user), no password."""
    try:
        parts = urlsplit(dsn)
        host = parts.hostname or "localhost"
        port = parts.port or 5432
    except ValueError:
        return "<unparseable DSN>"
    db = parts.path.lstrip("/") or (parts.username or "postgres")
    return f"{host}:{port}/{db}"
