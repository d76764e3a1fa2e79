"""Settings from the environment (and `.env`), shared by every command."""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, Self
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit, urlunsplit

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from cronwarden import redact
from cronwarden.errors import InvalidInput
from cronwarden.schedules.durations import parse_duration
from cronwarden.schedules.labels import key_problem, metric_label_name
from cronwarden.store.incidents import HORIZON_LEAD

DEFAULT_TASK_QUEUE = "cronwarden"
DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/cronwarden"
# Where `cronwarden dev` keeps its stack by default, and the settings file it writes there for a
# second shell.
DEV_STATE_DIR = Path(".cronwarden")
DEV_ENV_FILE = DEV_STATE_DIR / "env"


# Settings that may come from a file named by `CRONWARDEN_<NAME>_FILE` (a mounted Kubernetes
# Secret): every one that is, or may carry, a credential.
FILE_SETTINGS = (
    "database_url",
    "temporal_api_key",
    "alert_webhook_url",
    "alert_webhook_secret",
    "slack_webhook_url",
    "pagerduty_routing_key",
    "monitor_ping_url",
    "status_page_token",
)


class SecretFileSource(PydanticBaseSettingsSource):
    """`CRONWARDEN_<NAME>_FILE=/path`: the setting is the file's content, surrounding whitespace
    (the newline `echo` leaves) dropped. It wins over `CRONWARDEN_<NAME>`, so a stale variable
    left in a pod's environment cannot shadow the mounted Secret."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads every file itself

    def __call__(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for name in FILE_SETTINGS:
            variable = f"CRONWARDEN_{name.upper()}_FILE"
            path = os.environ.get(variable)
            if not path:
                continue
            try:
                found[name] = Path(path).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise InvalidInput(
                    f"invalid configuration: {variable} names {path}, which cannot be read "
                    f"({reason}); is the Secret mounted there?"
                ) from None
        return found


# The shortest dedupe horizon allowed, here and in drop_outbox_partitions (migration 0019).
OUTBOX_RETENTION_FLOOR = timedelta(days=7)


# Why each of these durations is at least a day (`Settings._day_or_more`).
_AT_LEAST_A_DAY = {
    "monitor_retention": "a page's record would go before anyone read it",
    "monitor_horizon_lead": "a re-apply needs time before the horizon",
}


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
    """Port of the worker's /healthz, /readyz and /metrics endpoints; unset serves none."""
    metrics_schedule_label: bool = True
    """Label the worker's run counts by schedule id. Off for a fleet of many schedules: the
    counts are then per outcome only (the label is dropped, not left empty)."""
    metrics_labels: str = ""
    """Comma-separated schedule label keys (`team,env`) the worker's run counts are labelled by,
    as `label_team`, `label_env`; none by default. Each key keeps at most 50 distinct values
    per worker, later ones counted as `other` (docs/metrics.md)."""
    graceful_shutdown_seconds: float = Field(default=30.0, ge=0)
    """How long a stopping worker lets in-flight runs finish before cancelling them."""
    max_concurrent_runs: int = Field(default=10, ge=1, le=1000)
    """Runs one worker executes at once. Each may hold two Postgres connections (its commit
    transaction and a lease renewal), so the worker's pool holds twice this, plus two."""
    tracing: Literal["otlp", "off"] = "off"
    """`otlp`: the worker traces its runs (Temporal's spans and the guard's phases) and exports
    them by OTLP over HTTP, configured by OpenTelemetry's own variables
    (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`, ...). Needs `cronwarden[otel]`."""

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
    monitor_horizon_lead: timedelta = HORIZON_LEAD
    """How long before a local-time schedule's compiled entries end (the last of the whole years
    `schedules apply` compiled) the monitor pages a `horizon` incident: the time left to re-apply
    before Temporal has no fire of it. A duration as in schedule files (`30d`), at least a day."""
    monitor_retention: timedelta = timedelta(days=90)
    """How long resolved incidents and settled (delivered or given up) notifications are kept
    before the monitor deletes them: a duration as in schedule files (`90d`, `720h`), at least
    a day."""
    outbox_retention: timedelta = timedelta(days=400)
    """The dedupe horizon: how long a fire's outbox record is kept, so how long a replay of it is
    known done (a duration as in schedule files, at least 7d). Records go a whole month at a
    time once the month ended longer ago than this; `backfill` and `audit` refuse a window
    reaching further back. The default is Temporal's default catchup window (a year) and a
    month's margin: set it above the longest catchup window a schedule uses."""
    monitor_sink_concurrency: int = Field(default=1, ge=1, le=64)
    """Deliveries in flight at once to one sink that answers. Above 1, pages of different
    schedules may reach the sink out of order (a schedule's own pages never do)."""
    monitor_breaker_failures: int = Field(default=3, ge=1)
    """A sink's circuit breaker opens after this many failed deliveries in a row: its pages wait
    (never dropped) while one probe tries the sink per cool-down."""
    monitor_breaker_cooldown_seconds: float = Field(default=30.0, gt=0)
    """How long an open breaker waits before its probe (never longer than the retry ceiling)."""
    alert_webhook_max_bytes: int = Field(default=262_144, ge=4096)
    """Largest webhook body sent: a bigger page is shortened to fit (fewer members listed)."""
    status_page_url: str | None = None
    """Public URL of the status page, linked from every page (a fleet page lists its first
    schedules and links there for the rest). Unset: pages name `cronwarden status` instead."""

    # The status page, served by the monitor at `/` on its metrics port.
    status_page: Literal["local", "any", "off"] = "local"
    """Who may read the page: `local` answers clients on the loopback interface only (a browser
    on the same host, `kubectl port-forward`), `any` every client that reaches the port (set a
    token), `off` serves no page. /metrics and the probes answer everyone either way."""
    status_page_token: SecretStr | None = None
    """When set, the page asks every client for it: `Authorization: Bearer <token>`, or the
    password of HTTP Basic (any user name) for a browser."""
    temporal_ui_url: str | None = None
    """Base URL of Temporal's Web UI (e.g. http://localhost:8233): the page links each slot to
    its run there. Unset: no links."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        files = SecretFileSource(settings_cls)
        return init_settings, files, env_settings, dotenv_settings, file_secret_settings

    @model_validator(mode="before")
    @classmethod
    def _remember_secrets(cls, data: Any) -> Any:
        # Before validation: a value refused below must not be quotable either.
        if isinstance(data, dict):
            redact.remember(secret_values(data))
        return data

    @field_validator("monitor_retention", "monitor_horizon_lead", mode="before")
    @classmethod
    def _day_or_more(cls, value: Any, info: ValidationInfo) -> Any:
        # The schedule file's durations (`90d`), not pydantic's ISO 8601 or bare seconds.
        if isinstance(value, str):
            value = parse_duration(value)
        if isinstance(value, timedelta) and value < timedelta(days=1):
            raise ValueError(f"must be at least 1d: {_AT_LEAST_A_DAY[str(info.field_name)]}")
        return value

    @field_validator("metrics_labels", mode="after")
    @classmethod
    def _label_keys(cls, value: str) -> str:
        keys = list(dict.fromkeys(k.strip() for k in value.split(",") if k.strip()))
        for key in keys:
            problem = key_problem(key)
            if problem is not None:
                raise ValueError(problem)
        names = [metric_label_name(k) for k in keys]
        clashing = sorted({k for k, n in zip(keys, names, strict=True) if names.count(n) > 1})
        if clashing:
            raise ValueError(
                f"the keys {', '.join(clashing)} would be one Prometheus label "
                f"({metric_label_name(clashing[0])}): name one of them"
            )
        return value

    @field_validator("outbox_retention", mode="before")
    @classmethod
    def _outbox_horizon(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = parse_duration(value)
        if isinstance(value, timedelta) and value < OUTBOX_RETENTION_FLOOR:
            # The partition functions refuse a shorter horizon too (migration 0019).
            raise ValueError(
                "must be at least 7d: a run retried or replayed after its record went could "
                "apply its key twice"
            )
        return value

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
            ("TEMPORAL_UI_URL", SecretStr(self.temporal_ui_url) if self.temporal_ui_url else None),
            ("STATUS_PAGE_URL", SecretStr(self.status_page_url) if self.status_page_url else None),
        ):
            if url is not None and not _is_http_url(url.get_secret_value()):
                raise ValueError(
                    f"CRONWARDEN_{name} must be an http:// or https:// URL with a host "
                    "(its value is not shown: it may carry a token)"
                )
        try:
            dsn_url(self.database_url.get_secret_value())
        except ValueError as exc:
            raise ValueError(f"CRONWARDEN_DATABASE_URL {exc}") from None
        if self.status_page_token is not None and not self.status_page_token.get_secret_value():
            # An empty token file must not read as "no token wanted": it would open the page.
            raise ValueError(
                "CRONWARDEN_STATUS_PAGE_TOKEN is empty: set a token, or unset it for none"
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
        """The DSN as a URL, whichever form it was given in (asyncpg reads only URLs)."""
        return dsn_url(self.database_url.get_secret_value())

    def job_modules(self) -> list[str]:
        return [m.strip() for m in self.jobs.split(",") if m.strip()]

    def metrics_label_keys(self) -> list[str]:
        """The schedule label keys `metrics_labels` names, in its order, each once."""
        return list(dict.fromkeys(k.strip() for k in self.metrics_labels.split(",") if k.strip()))


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


# Settings whose whole value is a secret, and those that are URLs which may carry one.
_SECRET_FIELDS = (
    "temporal_api_key",
    "alert_webhook_secret",
    "pagerduty_routing_key",
    "status_page_token",
)
_SECRET_URL_FIELDS = ("alert_webhook_url", "slack_webhook_url", "monitor_ping_url")


def secret_values(data: dict[str, Any]) -> list[str | None]:
    """Every secret in raw settings input: whole tokens, URLs that carry one (and their path,
    which an HTTP error may quote alone), and the DSN's password in any of its spellings."""

    def text(name: str) -> str | None:
        value = data.get(name)
        if isinstance(value, SecretStr):
            return value.get_secret_value()
        return value if isinstance(value, str) else None

    found = [text(name) for name in _SECRET_FIELDS]
    for name in _SECRET_URL_FIELDS:
        url = text(name)
        if url:
            found.append(url)
            try:
                parts = urlsplit(url)
            except ValueError:
                continue
            found.append(urlunsplit(("", "", parts.path, parts.query, "")))
    dsn = text("database_url")
    if dsn:
        password = dsn_password(dsn)
        found += [password, quote(password or "", safe="")]
    return found


_KEYWORD_PAIR = re.compile(r"\s*(\w+)\s*=\s*(?:'((?:[^'\\]|\\.)*)'|((?:[^\s'\\]|\\.)+))")
# libpq keywords that have a place in a URL's authority and path; the rest become parameters.
_URL_PARTS = {"host", "hostaddr", "port", "user", "password", "dbname"}


def _keyword_pairs(dsn: str) -> dict[str, str]:
    """libpq's `key=value key='quoted value'` form, as a dict."""
    pairs: dict[str, str] = {}
    pos = 0
    while dsn[pos:].strip():
        match = _KEYWORD_PAIR.match(dsn, pos)
        if match is None:
            raise ValueError(
                "is neither a postgresql:// URL nor libpq key=value pairs "
                "(its value is not shown: it may carry a password)"
            )
        raw = match[2] if match[2] is not None else match[3]
        pairs[match[1]] = re.sub(r"\\(.)", r"\1", raw)
        pos = match.end()
    return pairs


def _is_url(dsn: str) -> bool:
    return "://" in dsn


def dsn_url(dsn: str) -> str:
    """`dsn` as a postgresql:// URL; a libpq keyword DSN (`host=db password=…`) is converted."""
    if _is_url(dsn):
        return dsn
    pairs = _keyword_pairs(dsn)
    user = quote(pairs.get("user", ""), safe="")
    password = pairs.get("password")
    auth = user + (f":{quote(password, safe='')}" if password is not None else "")
    host = pairs.get("host") or pairs.get("hostaddr", "")
    port = pairs.get("port")
    netloc = (f"{auth}@" if auth else "") + quote(host, safe=",") + (f":{port}" if port else "")
    params = {k: v for k, v in pairs.items() if k not in _URL_PARTS}
    path = "/" + quote(pairs.get("dbname", ""), safe="")
    return urlunsplit(("postgresql", netloc, path, urlencode(params), ""))


def dsn_password(dsn: str) -> str | None:
    """The password a DSN carries, in its authority, its `?password=` or its keyword form."""
    try:
        if not _is_url(dsn):
            return _keyword_pairs(dsn).get("password")
        parts = urlsplit(dsn)
        query = parse_qs(parts.query).get("password")
        if query:
            return query[0]
        return unquote(parts.password) if parts.password else None
    except ValueError:
        return None


def redact_dsn(dsn: str) -> str:
    """The DSN (as a URL) with any password replaced, safe for logs and error messages."""
    try:
        parts = urlsplit(dsn_url(dsn))
    except ValueError:
        return "<unparseable DSN>"
    query = urlencode(
        [(k, redact.MASK if k == "password" else v) for k, v in _query_pairs(parts.query)],
        safe="*",
    )
    netloc = parts.netloc
    if parts.password is not None:
        netloc = f"{parts.username or ''}:{redact.MASK}@{netloc.rsplit('@', 1)[-1]}"
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _query_pairs(query: str) -> list[tuple[str, str]]:
    return [(k, v) for k, values in parse_qs(query, keep_blank_values=True).items() for v in values]


def describe_dsn(dsn: str) -> str:
    """Where a DSN points, for a one-sentence error: host:port/database, no password."""
    try:
        parts = urlsplit(dsn_url(dsn))
        host = parts.hostname or "localhost"
        port = parts.port or 5432
    except ValueError:
        return "<unparseable DSN>"
    db = unquote(parts.path.lstrip("/")) or unquote(parts.username or "postgres")
    return f"{host}:{port}/{db}"
