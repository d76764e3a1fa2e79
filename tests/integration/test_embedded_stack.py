from __future__ import annotations

import asyncio
import itertools
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import pytest
from google.protobuf.duration_pb2 import Duration
from temporalio.api.workflowservice.v1 import (
    DescribeNamespaceRequest,
    GetSystemInfoRequest,
    ListNamespacesRequest,
    RegisterNamespaceRequest,
)
from temporalio.client import Client

from cronwarden.embedded import EmbeddedPostgres, EmbeddedTemporal, free_port
from cronwarden.embedded.processes import cmdline
from cronwarden.embedded.temporal import (
    SCHEDULER_START_RPS,
    SCHEDULER_START_RPS_KEY,
    SCHEDULER_WORKER_OPTIONS_KEY,
)
from cronwarden.errors import CronwardenError, PortInUse

pytestmark = pytest.mark.integration

# A taken port must be reported before any server is launched, not after a start timeout.
PROMPT_SECONDS = 5.0


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    root = tmp_path_factory.mktemp("postgres")
    with EmbeddedPostgres(data_dir=root / "data", port=free_port(), fast_unsafe=True) as pg:
        yield pg


@pytest.fixture(scope="module")
def temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTemporal]:
    root = tmp_path_factory.mktemp("temporal")
    with EmbeddedTemporal(
        port=free_port(), ui_port=None, db_file=None, log_file=root / "temporal.log"
    ) as server:
        yield server


@contextmanager
def _listening() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


async def _fetchval(dsn: str, query: str) -> object:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(query)
    finally:
        await conn.close()


async def test_postgres_answers_select_1(postgres: EmbeddedPostgres) -> None:
    assert postgres.running
    assert await _fetchval(postgres.dsn(), "select 1") == 1


async def test_postgres_keeps_a_table_across_a_restart(postgres: EmbeddedPostgres) -> None:
    conn = await asyncpg.connect(postgres.dsn())
    try:
        await conn.execute("create table survivor (id int primary key)")
        await conn.execute("insert into survivor values (42)")
    finally:
        await conn.close()

    await asyncio.to_thread(postgres.restart)

    assert postgres.running
    assert await _fetchval(postgres.dsn(), "select id from survivor") == 42


async def test_create_database_quotes_the_name_and_tolerates_an_existing_one(
    postgres: EmbeddedPostgres,
) -> None:
    name = 'odd "name"; drop'
    postgres.create_database(name)
    postgres.create_database(name)
    postgres.create_database("copy_of_odd", template=name)

    assert await _fetchval(postgres.dsn(name), "select current_database()") == name
    with pytest.raises(CronwardenError, match="42P04"):
        postgres.create_database(name, exists_ok=False)


async def test_temporal_answers_and_serves_the_default_namespace(
    temporal: EmbeddedTemporal,
) -> None:
    client = await Client.connect(temporal.address)

    info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
    namespaces = await client.workflow_service.list_namespaces(ListNamespacesRequest())

    assert info.server_version
    assert "default" in {ns.namespace_info.name for ns in namespaces.namespaces}
    assert temporal.ui_url is None


def test_temporal_runs_with_the_raised_scheduler_start_rate(temporal: EmbeddedTemporal) -> None:
    # At Temporal's default (30 starts/s per namespace) a fleet firing on one second queues:
    # the running server's own argv, not the one we meant to pass, must carry the setting.
    assert temporal.pid is not None
    argv = cmdline(temporal.pid)
    setting = f"{SCHEDULER_START_RPS_KEY}={SCHEDULER_START_RPS:g}"

    assert ["--dynamic-config-value", setting] in [list(p) for p in itertools.pairwise(argv)]
    assert SCHEDULER_START_RPS >= 1000


def test_temporal_runs_its_schedulers_with_more_pollers_and_a_longer_sticky_wait(
    temporal: EmbeddedTemporal,
) -> None:
    # At the defaults a same-second burst timed scheduler tasks out of the sticky queue and
    # replayed them from scratch: later fires each burst, and skip dropping fires.
    assert temporal.pid is not None
    values = [
        v for k, v in itertools.pairwise(cmdline(temporal.pid)) if k == "--dynamic-config-value"
    ]
    options = [v for v in values if v.startswith(f"{SCHEDULER_WORKER_OPTIONS_KEY}=")]

    assert len(options) == 1
    parsed = json.loads(options[0].split("=", 1)[1])
    assert parsed["MaxConcurrentWorkflowTaskPollers"] > 2
    assert parsed["StickyScheduleToStartTimeout"] == "30s"


async def test_temporal_with_a_db_file_keeps_a_namespace_across_a_restart(
    tmp_path: Path,
) -> None:
    server = EmbeddedTemporal(
        port=free_port(),
        ui_port=free_port(),
        db_file=tmp_path / "temporal.db",
        log_file=tmp_path / "temporal.log",
    )
    await asyncio.to_thread(server.start)
    try:
        client = await Client.connect(server.address)
        await client.workflow_service.register_namespace(
            RegisterNamespaceRequest(
                namespace="survivor", workflow_execution_retention_period=Duration(seconds=86400)
            )
        )

        await asyncio.to_thread(server.restart)

        client = await Client.connect(server.address)
        described = await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace="survivor")
        )
        assert described.namespace_info.name == "survivor"
        assert server.ui_url == f"http://127.0.0.1:{server.ui_port}"
    finally:
        await asyncio.to_thread(server.stop)
    assert not server.running


def test_postgres_on_a_taken_port_raises_port_in_use_promptly(tmp_path: Path) -> None:
    with _listening() as port:
        pg = EmbeddedPostgres(data_dir=tmp_path / "data", port=port)
        began = time.monotonic()
        with pytest.raises(PortInUse, match=rf"port {port} on 127\.0\.0\.1.*--postgres-port"):
            pg.start(timeout=30)

    assert time.monotonic() - began < PROMPT_SECONDS
    assert not pg.running


@pytest.mark.parametrize("taken", ["frontend", "ui"])
def test_temporal_on_a_taken_port_raises_port_in_use_promptly(tmp_path: Path, taken: str) -> None:
    with _listening() as port:
        other = free_port()
        server = EmbeddedTemporal(
            port=port if taken == "frontend" else other,
            ui_port=port if taken == "ui" else other,
            db_file=None,
            log_file=tmp_path / "temporal.log",
        )
        flag = "--temporal-port" if taken == "frontend" else "--ui-port"
        began = time.monotonic()
        with pytest.raises(PortInUse, match=rf"port {port} on 127\.0\.0\.1.*{flag}"):
            server.start(timeout=30)

    assert time.monotonic() - began < PROMPT_SECONDS
    assert not server.running


def test_postgres_start_stops_a_server_orphaned_by_a_crashed_run(tmp_path: Path) -> None:
    port = free_port()
    orphan = EmbeddedPostgres(data_dir=tmp_path / "data", port=port, fast_unsafe=True)
    orphan.start()
    try:
        # A second launcher on the same data dir stands in for `cronwarden dev` after a crash.
        with EmbeddedPostgres(data_dir=tmp_path / "data", port=port, fast_unsafe=True) as successor:
            assert successor.running
            assert not orphan.running
    finally:
        orphan.stop()


def test_postgres_start_removes_a_pid_file_whose_process_is_gone(tmp_path: Path) -> None:
    pg = EmbeddedPostgres(data_dir=tmp_path / "data", port=free_port(), fast_unsafe=True)
    pg.start()
    pg.stop()
    gone = subprocess.Popen(["true"])
    gone.wait()
    pid_file = tmp_path / "data" / "postmaster.pid"
    pid_file.write_text(f"{gone.pid}\n{tmp_path / 'data'}\n")

    with pg:
        assert pg.running


def test_temporal_start_stops_a_server_orphaned_by_a_crashed_run(tmp_path: Path) -> None:
    port = free_port()

    def launcher() -> EmbeddedTemporal:
        return EmbeddedTemporal(
            port=port,
            ui_port=None,
            db_file=tmp_path / "temporal.db",
            log_file=tmp_path / "temporal.log",
        )

    orphan = launcher()
    orphan.start()
    try:
        with launcher() as successor:
            assert successor.running
            assert not orphan.running
    finally:
        orphan.stop()
