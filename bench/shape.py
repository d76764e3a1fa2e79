"""What a measurement needs of the benchmark stack, and a stand-alone stack to run one module
on its own (`python -m bench.guard_overhead [--quick]`).

The measurements take anything shaped like this: the harness's `BenchStack` is.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Protocol

from temporalio.client import Client

from bench.table import Row, render
from cronwarden.embedded import EmbeddedPostgres, EmbeddedTemporal, free_port
from cronwarden.logs import configure
from store.migrate import migrate
from store.pool import connect


class Stack(Protocol):
    @property
    def temporal(self) -> EmbeddedTemporal: ...
    @property
    def postgres(self) -> EmbeddedPostgres: ...
    @property
    def client(self) -> Client: ...
    @property
    def work_dir(self) -> Path: ...
    def dsn_for(self, name: str) -> str | Awaitable[str]: ...


async def fresh_dsn(stack: Stack, name: str) -> str:
    """A fresh migrated database, whether the stack hands its DSN over directly or awaitably."""
    dsn = stack.dsn_for(name)
    if inspect.isawaitable(dsn):
        return await dsn
    return dsn


class StandaloneStack:
    def __init__(
        self, temporal: EmbeddedTemporal, postgres: EmbeddedPostgres, client: Client, work: Path
    ) -> None:
        self.temporal = temporal
        self.postgres = postgres
        self.client = client
        self.work_dir = work

    async def dsn_for(self, name: str) -> str:
        self.postgres.create_database(name)
        dsn = self.postgres.dsn(name)
        conn = await connect(dsn)
        try:
            await migrate(conn)
        finally:
            await conn.close()
        return dsn


@asynccontextmanager
async def standalone_stack() -> AsyncIterator[StandaloneStack]:
    with tempfile.TemporaryDirectory(prefix="cw-bench-") as tmp:
        root = Path(tmp)
        postgres = EmbeddedPostgres(
            data_dir=root / "pg", port=free_port(), fast_unsafe=True, log_file=root / "pg.log"
        )
        temporal = EmbeddedTemporal(
            port=free_port(), ui_port=None, db_file=None, log_file=root / "temporal.log"
        )
        postgres.start()
        try:
            temporal.start()
            try:
                client = await Client.connect(temporal.address)
                yield StandaloneStack(temporal, postgres, client, root)
            finally:
                temporal.stop()
        finally:
            postgres.stop()


def run_alone(measure: Callable[..., Awaitable[list[Row]]], doc: str | None) -> None:
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0] or None)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, no verdicts")
    args = parser.parse_args()

    async def main() -> None:
        # The runs' own info lines would bury the table.
        configure(level="WARNING")
        async with standalone_stack() as stack:
            print(render(await measure(stack, quick=args.quick)))

    asyncio.run(main())
