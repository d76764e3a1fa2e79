"""No secret in any output: commands that fail on a configuration full of secrets print none of
them, log none of them, and page with none of them."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest

from cronwarden.embedded import EmbeddedTemporal, free_port
from tests.support.cli import cronwarden_argv
from tests.support.paths import REPO_ROOT
from tests.support.receiver import Receiver

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Secrets:
    password: str
    api_key: str
    webhook_token: str
    slack_token: str
    ping_token: str
    routing_key: str
    signing_secret: str

    def all(self) -> list[str]:
        return list(vars(self).values())


@pytest.fixture
def secrets() -> Secrets:
    def token(what: str) -> str:
        return f"{what}-{uuid.uuid4().hex}"

    return Secrets(
        password=token("pw"),
        api_key=token("key"),
        webhook_token=token("hook"),
        slack_token=token("slack"),
        ping_token=token("ping"),
        routing_key=token("route"),
        signing_secret=token("sign"),
    )


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def secret_env(secrets: Secrets, receiver: Receiver, **values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONWARDEN_")}
    env.update(
        PYTHONPATH=str(REPO_ROOT),
        CRONWARDEN_JOBS="tests.support.jobs",
        CRONWARDEN_ALERT_WEBHOOK_URL=receiver.url(f"/hook/{secrets.webhook_token}"),
        CRONWARDEN_ALERT_WEBHOOK_SECRET=secrets.signing_secret,
        CRONWARDEN_SLACK_WEBHOOK_URL=receiver.url(f"/services/{secrets.slack_token}"),
        CRONWARDEN_MONITOR_PING_URL=receiver.url(f"/ping?token={secrets.ping_token}"),
        CRONWARDEN_PAGERDUTY_URL=receiver.url("/pagerduty"),
        CRONWARDEN_PAGERDUTY_ROUTING_KEY=secrets.routing_key,
    )
    env.update({f"CRONWARDEN_{k.upper()}": v for k, v in values.items()})
    return env


def unreachable_dsns(password: str) -> list[str]:
    port = free_port()  # handed out and parked: nothing listens there
    return [
        f"host=127.0.0.1 port={port} user=app password={password} dbname=ledger",
        f"postgresql://app@127.0.0.1:{port}/ledger?password={password}",
    ]


async def run(env: dict[str, str], *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *cronwarden_argv("--log-json", "--log-level", "DEBUG", *args),
        env=env,
        cwd=REPO_ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=90)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def assert_clean(text: str, secrets: Secrets, where: str) -> None:
    leaked = [s for s in secrets.all() if s in text]
    assert not leaked, f"{where} shows {leaked}:\n{text}"


async def test_commands_failing_on_an_unreachable_database_show_no_secret(
    temporal_server: EmbeddedTemporal, receiver: Receiver, secrets: Secrets
) -> None:
    for dsn in unreachable_dsns(secrets.password):
        env = secret_env(
            secrets, receiver, database_url=dsn, temporal_address=temporal_server.address
        )
        for args in (
            ["migrate"],
            ["status"],
            ["monitor", "--once"],
            ["worker"],
            ["schedules", "describe", "nope"],
        ):
            code, output = await run(env, *args)
            assert code != 0, output
            assert "cannot reach" in output or "no schedule" in output, output
            assert_clean(output, secrets, f"`{' '.join(args)}` with DSN form {dsn[:4]}")
    # `monitor --once` paged every sink directly that it cannot reach the database.
    bodies = [r for r in receiver.requests if r.method == "POST"]
    assert {r.path for r in bodies} >= {"/pagerduty"}
    for request in bodies:
        body = request.body
        if request.path == "/pagerduty":
            # The Events API authenticates by this field: the one place the key must be.
            assert body.pop("routing_key") == secrets.routing_key
        assert_clean(str(body), secrets, f"the page sent to {request.path.split('/')[1]}")


async def test_commands_failing_on_an_unreachable_temporal_show_no_secret(
    receiver: Receiver, secrets: Secrets
) -> None:
    env = secret_env(
        secrets,
        receiver,
        database_url=unreachable_dsns(secrets.password)[0],
        temporal_address=f"127.0.0.1:{free_port()}",
        temporal_api_key=secrets.api_key,
    )
    for args in (["status"], ["schedules", "list"], ["worker"], ["audit", "nope"]):
        code, output = await run(env, *args)
        assert code == 1, output
        assert "cannot reach Temporal" in output, output
        assert_clean(output, secrets, f"`{' '.join(args)}`")


@pytest.mark.parametrize(
    "bad",
    [
        {"health_port": "0"},
        {"alert_webhook_url": "ftp://alerts.example/{token}"},
        {"database_url": "password={token} this is no dsn"},
    ],
    ids=lambda bad: next(iter(bad)),
)
async def test_a_refused_configuration_shows_no_secret(
    receiver: Receiver, secrets: Secrets, bad: dict[str, str]
) -> None:
    planted = {
        "database_url": unreachable_dsns(secrets.password)[0],
        "temporal_api_key": secrets.api_key,
    } | {k: v.format(token=secrets.password) for k, v in bad.items()}
    env = secret_env(secrets, receiver, **planted)
    for args in (["status"], ["monitor", "--once"]):
        code, output = await run(env, *args)
        assert code == 2, output
        assert "invalid configuration" in output, output
        assert_clean(output, secrets, f"`{' '.join(args)}` with {next(iter(bad))} refused")


async def test_a_keyword_form_dsn_reaches_the_database(database: str) -> None:
    # asyncpg reads only URLs; libpq's key=value form is converted, not refused.
    url = urlsplit(database)
    dsn = f"host={url.hostname} port={url.port} user={url.username} dbname={url.path[1:]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONWARDEN_")}
    env.update(PYTHONPATH=str(REPO_ROOT), CRONWARDEN_DATABASE_URL=dsn)
    code, output = await run(env, "migrate", "--check")
    assert code == 0, output
