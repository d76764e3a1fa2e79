"""The stack every measurement runs on: an embedded Temporal dev server and Postgres, booted once
per `python -m bench` in a temp dir, the same servers `cronwarden dev` and the tests use.

Each measurement gets what it needs from `BenchStack`: the servers, a connected client, a fresh
migrated database per name (copied from a template migrated once, so a database costs one
CREATE DATABASE), the environment for a `cronwarden` subprocess, and how many timed runs to take.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import re
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.client import Client

from bench.table import Row, render
from cronwarden.embedded import EmbeddedPostgres, EmbeddedTemporal, free_port
from cronwarden.logs import configure
from cronwarden.store.migrate import migrate
from cronwarden.store.pool import connect

REPO_ROOT = Path(__file__).resolve().parents[1]
_TEMPLATE_DB = "bench_template"
DEFAULT_REPEAT = 5


@dataclass
class BenchStack:
    temporal: EmbeddedTemporal
    postgres: EmbeddedPostgres
    client: Client
    work_dir: Path
    """A temp dir that lives as long as the stack: logs, files a measurement writes."""
    repeat: int
    """Timed runs per figure; each row reports their median."""
    quick: bool
    _names: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def dsn_for(self, name: str) -> str:
        """DSN of a new database holding the migrated schema. Every call makes a new one (a
        repeated measurement never sees the rows of the previous run)."""
        safe = re.sub(r"[^a-z0-9_]", "_", name.lower())[:40]
        database = f"bench_{safe}_{next(self._names)}"
        self.postgres.create_database(database, template=_TEMPLATE_DB, exists_ok=False)
        return self.postgres.dsn(database)

    def cli_env(self, dsn: str, *, task_queue: str, jobs: str = "") -> dict[str, str]:
        """Environment for a `cronwarden` subprocess pointed at this stack."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRONWARDEN_")}
        env.update(
            CRONWARDEN_TEMPORAL_ADDRESS=self.temporal.address,
            CRONWARDEN_DATABASE_URL=dsn,
            CRONWARDEN_TASK_QUEUE=task_queue,
            CRONWARDEN_JOBS=jobs,
            PYTHONPATH=str(REPO_ROOT),
        )
        return env

    @staticmethod
    def python_argv(*args: str) -> list[str]:
        return [sys.executable, *args]


@asynccontextmanager
async def boot(*, repeat: int, quick: bool) -> AsyncIterator[BenchStack]:
    """Start both servers in a temp dir, yield the stack, stop them (whatever happened)."""
    with tempfile.TemporaryDirectory(prefix="cronwarden-bench-") as tmp:
        root = Path(tmp)
        postgres = EmbeddedPostgres(
            data_dir=root / "pg", port=free_port(), fast_unsafe=True, log_file=root / "pg.log"
        )
        temporal = EmbeddedTemporal(
            port=free_port(), ui_port=None, db_file=None, log_file=root / "temporal.log"
        )
        try:
            postgres.start()
            temporal.start()
            postgres.create_database(_TEMPLATE_DB)
            conn = await connect(postgres.dsn(_TEMPLATE_DB))
            try:
                await migrate(conn)
            finally:
                await conn.close()
            client = await Client.connect(temporal.address)
            work_dir = root / "work"
            work_dir.mkdir()
            yield BenchStack(
                temporal=temporal,
                postgres=postgres,
                client=client,
                work_dir=work_dir,
                repeat=repeat,
                quick=quick,
            )
        finally:
            temporal.stop()
            postgres.stop()


def run_alone(measure: Callable[..., Awaitable[list[Row]]], doc: str | None) -> None:
    """Run one measurement module on a stack of its own: `python -m bench.<name> [--quick]`."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0] or None)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, no verdicts")
    parser.add_argument(
        "--repeat", type=int, help=f"timed runs per figure (default {DEFAULT_REPEAT}, quick 1)"
    )
    args = parser.parse_args()
    repeat = args.repeat or (1 if args.quick else DEFAULT_REPEAT)

    async def main() -> None:
        # The runs' own info lines would bury the table.
        configure(level="WARNING")
        async with boot(repeat=repeat, quick=args.quick) as stack:
            print(render(await measure(stack, quick=args.quick)))

    asyncio.run(main())
