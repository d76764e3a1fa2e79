"""Settings from the environment (and `.env`), shared by every command."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr
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

    @property
    def dsn(self) -> str:
        return self.database_url.get_secret_value()

    def job_modules(self) -> list[str]:
        return [m.strip() for m in self.jobs.split(",") if m.strip()]


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
