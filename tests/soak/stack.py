"""What the soak runs on and breaks: its two servers and its worker processes.

Each worker is a slot with a name (`w1`...): a fault names the slot, and a killed worker's
replacement takes its slot, so a plan drawn before anything started can still name it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cronwarden.embedded import EmbeddedPostgres, EmbeddedTemporal
from tests.support.faults.worker_process import WorkerProcess
from tests.support.paths import REPO_ROOT
from tests.support.servers import embedded_postgres, embedded_temporal

GRACEFUL_SHUTDOWN = 5.0


@dataclass(frozen=True)
class Servers:
    postgres: EmbeddedPostgres
    temporal: EmbeddedTemporal
    """Persisted to a SQLite file: a restart keeps its schedules and histories."""


@contextmanager
def own_servers(root: Path) -> Iterator[Servers]:
    """A Postgres and a restartable Temporal dev server under `root`, stopped on exit."""
    with (
        embedded_postgres(root / "postgres") as postgres,
        embedded_temporal(root / "temporal", persisted=True) as temporal,
    ):
        yield Servers(postgres, temporal)


def cronwarden_env(servers: Servers, database: str, task_queue: str) -> dict[str, str]:
    """Environment for a `cronwarden` subprocess (worker or CLI) on the soak's servers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONWARDEN_")}
    env.update(
        CRONWARDEN_TEMPORAL_ADDRESS=servers.temporal.address,
        CRONWARDEN_DATABASE_URL=database,
        CRONWARDEN_JOBS="tests.support.jobs",
        CRONWARDEN_TASK_QUEUE=task_queue,
        PYTHONPATH=str(REPO_ROOT),
    )
    return env


class Workers:
    """Named worker slots; every process ever started is kept, for its log and for teardown."""

    def __init__(self, env: dict[str, str], names: list[str]) -> None:
        self._env = env
        self.slots = {name: WorkerProcess(env, graceful=GRACEFUL_SHUTDOWN) for name in names}
        self.all: list[WorkerProcess] = list(self.slots.values())
        self.down: set[str] = set()
        """Slots a fault keeps empty on purpose (killed, replacement not started yet)."""
        self.exits: list[str] = []
        """Workers that exited on their own, and were started again by `supervise`."""

    async def ready(self, *, timeout: float) -> None:
        await asyncio.gather(
            *(w.wait_event("worker.started", timeout=timeout) for w in self.slots.values())
        )

    async def supervise(self, say: Callable[[str], None]) -> None:
        """Start again a worker that exited on its own (one started while Temporal was down
        gives up), as its process supervisor would in production; until cancelled."""
        while True:
            for name, worker in list(self.slots.items()):
                if name in self.down or worker.proc.poll() is None:
                    continue
                new = self.replace(name)
                gone = f"{name} (pid {worker.pid}) exited on its own ({worker.proc.returncode})"
                self.exits.append(gone)
                say(f"{gone}: started again (pid {new.pid})")
            await asyncio.sleep(0.5)

    def replace(self, name: str) -> WorkerProcess:
        worker = WorkerProcess(self._env, graceful=GRACEFUL_SHUTDOWN)
        self.slots[name] = worker
        self.all.append(worker)
        return worker

    def stop_all(self) -> None:
        """SIGKILL every process (a stopped one too): the soak is over."""
        errors: list[Exception] = []
        for worker in self.all:
            try:
                worker.stop()
            except Exception as exc:  # every worker is stopped; the first error is raised
                errors.append(exc)
        if errors:
            raise errors[0]

    def save_logs(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for i, worker in enumerate(self.all):
            (directory / f"worker-{i}-{worker.pid}.log").write_text(worker.output)
