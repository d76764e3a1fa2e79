"""No secret in any output: commands that fail on a configuration full of secrets print none of
them, log none of them, and page with none of them; a job whose error quotes secrets leaves none
in its heartbeat row, the incident, the pages the sinks receive, the status page, `status --json`
or any log line (the Temporal SDK's own included)."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest
from temporalio.client import Client, WorkflowFailureError

from cronwarden.embedded import EmbeddedTemporal, free_port
from tests.support.cli import cli, cronwarden_argv
from tests.support.http_probe import http_get_text
from tests.support.leaky_jobs import PLANTED
from tests.support.monitor import stage
from tests.support.paths import REPO_ROOT
from tests.support.receiver import Receiver
from tests.support.runs import heartbeat, start_run
from tests.support.waiting import wait_for

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


@dataclass(frozen=True)
class Planted:
    """Secrets nothing was configured with: only their shape gives them away."""

    url_password: str
    query_token: str
    bearer: str

    def all(self) -> list[str]:
        return list(vars(self).values())


@asynccontextmanager
async def process(argv: list[str], env: dict[str, str], log: Path) -> AsyncIterator[None]:
    """A `cronwarden` subprocess logging JSON into `log` for the life of the block."""
    with log.open("ab") as out:
        proc = await asyncio.create_subprocess_exec(
            *cronwarden_argv("--log-json", *argv),
            env=env,
            cwd=REPO_ROOT,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    try:
        yield
    finally:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), timeout=30)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def test_a_job_error_quoting_secrets_publishes_none(
    temporal_server: EmbeddedTemporal,
    client: Client,
    database: str,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    receiver: Receiver,
    secrets: Secrets,
    tmp_path: Path,
) -> None:
    planted = Planted(
        url_password=f"urlpw{uuid.uuid4().hex}",
        query_token=f"qtok{uuid.uuid4().hex}",
        bearer=f"bear{uuid.uuid4().hex}",
    )
    # The same settings for the worker and the monitor, as a shared .env gives them. The
    # embedded server trusts local connections: the password rides along unchecked.
    env = secret_env(
        secrets,
        receiver,
        database_url=f"{database}?password={secrets.password}",
        temporal_address=temporal_server.address,
        task_queue=task_queue,
        jobs="tests.support.leaky_jobs",
    )
    env[PLANTED] = json.dumps(vars(planted))
    # The Slack token wrapped across a line break: its second half is findable on its own.
    wrapped_half = secrets.slack_token[10:]
    everything = [*secrets.all(), *planted.all(), wrapped_half]

    def assert_none(text: str, where: str) -> None:
        if where == "the page sent to pagerduty":
            text = text.replace(secrets.routing_key, "", 1)  # its one rightful place
        leaked = [s for s in everything if s in text]
        assert not leaked, f"{where} shows {leaked}:\n{text[:4000]}"

    await stage(pool, schedule_id)  # overdue: the monitor pages with the last error
    worker_log, monitor_log = tmp_path / "worker.log", tmp_path / "monitor.log"
    page_port = free_port()
    async with process(["worker"], env, worker_log):
        handle = await start_run(
            client, task_queue, schedule_id, job="leaky", args={"padding": 50_000}, max_attempts=1
        )
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), timeout=60)
        beat = await heartbeat(pool, schedule_id)
        history = (await handle.fetch_history()).to_json()
    # The run's history in Temporal (the job's exception, its cause and traceback, as the
    # worker reported them), shown to anyone with the UI.
    assert "could not post to ***" in history, history[-6000:]
    assert_none(history, "the run's history in Temporal")
    assert beat["last_error"] is not None
    last_error: str = beat["last_error"]
    assert_none(last_error, "last_error")
    assert "could not post to ***" in last_error
    assert "https://deploy:***@git.example/repo.git" in last_error
    # Kept bounded, with a marker; the secret past the cut was blanked before the cut.
    assert len(last_error) <= 2000 and last_error.endswith("characters in all]")

    async with process(
        ["monitor", "--interval", "0.2", "--metrics-port", str(page_port)], env, monitor_log
    ):
        sinks = ("/pagerduty", f"/hook/{secrets.webhook_token}", f"/services/{secrets.slack_token}")

        async def paged() -> bool:
            return all(receiver.at(path, accepted_only=True) for path in sinks)

        await wait_for(paged, timeout=60, what="a page on every sink")

        async def page(path: str) -> str:
            code, text = await http_get_text(page_port, path)
            return text if code == 200 else ""

        schedule_page = await wait_for(
            lambda: page(f"/schedules/{schedule_id}"), timeout=30, what="the schedule's page"
        )
        overview = await wait_for(lambda: page("/"), timeout=30, what="the overview")
    assert "could not post to ***" in schedule_page
    for where, text in (("the schedule's page", schedule_page), ("the overview", overview)):
        assert_none(text, where)
    for request in receiver.requests:
        if request.method == "POST":
            assert "could not post to ***" in request.raw.decode()
            assert_none(request.raw.decode(), f"the page sent to {request.path.split('/')[1]}")
    async with pool.acquire() as conn:
        incidents = await conn.fetch("SELECT summary, details::text FROM cronwarden.incidents")
        messages = await conn.fetch("SELECT message::text FROM cronwarden.notifications")
    assert incidents and messages
    assert_none(repr([tuple(r) for r in incidents]), "the incident")
    assert_none(repr([tuple(r) for r in messages]), "the notifications")

    # `status --json` run by someone who knows none of the secrets: what it shows was stored.
    plain = {k: v for k, v in env.items() if not k.startswith("CRONWARDEN_") and k != PLANTED}
    plain.update(CRONWARDEN_DATABASE_URL=database, CRONWARDEN_TASK_QUEUE=task_queue)
    plain.update(CRONWARDEN_TEMPORAL_ADDRESS=temporal_server.address)
    status = await cli(plain, "status", "--json")
    assert schedule_id in status.stdout, status.stderr
    assert_none(status.stdout, "status --json")

    worker_lines = worker_log.read_text(errors="replace")
    assert_none(worker_lines, "the worker's log")
    assert_none(monitor_log.read_text(errors="replace"), "the monitor's log")
    sdk = [
        json.loads(line)
        for line in worker_lines.splitlines()
        if "Completing activity as failed" in line
    ]
    # The SDK's own line, traceback and cause included, came through the redacting pipeline.
    assert sdk and sdk[0]["event"] == "library.log", worker_lines[-4000:]
    assert "PagerDuty refused routing key ***" in sdk[0]["exception"]
