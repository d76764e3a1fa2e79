"""Worker subprocesses a fault scenario kills, stops and resumes, with their JSON log kept.

A worker's output is read by a thread for its whole life: a stopped reader would let the pipe
fill up, and a worker blocked on a full pipe looks exactly like a hung worker. Scenarios then
ask the collected log which events a given process wrote.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.waiting import wait_for
from tests.support.workers import start_worker_process

SKEWED_CLOCK = Path(__file__).parent / "skewed_clock"
"""Put first on a worker's PYTHONPATH, with CRONWARDEN_TEST_CLOCK_SKEW_SECONDS set: the worker's
wall clock is off by that much (skewed_clock/sitecustomize.py)."""


class WorkerProcess:
    """One `cronwarden worker` subprocess and every JSON log line it wrote so far."""

    def __init__(self, env: dict[str, str], *, graceful: float = 5) -> None:
        self.proc = start_worker_process(env, graceful=graceful)
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name=f"worker-{self.pid}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            with self._lock:
                self._lines.append(raw.decode(errors="replace"))

    @property
    def output(self) -> str:
        with self._lock:
            return "".join(self._lines)

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The JSON log events written so far (only those named `name`, if given)."""
        with self._lock:
            lines = list(self._lines)
        found = []
        for line in lines:
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if name is None or event.get("event") == name:
                found.append(event)
        return found

    async def wait_event(self, name: str, *, timeout: float) -> dict[str, Any]:
        async def logged() -> dict[str, Any] | None:
            if self.proc.poll() is not None and not self.events(name):
                raise AssertionError(
                    f"worker {self.pid} exited ({self.proc.returncode}) without logging {name}"
                )
            found = self.events(name)
            return found[0] if found else None

        try:
            event = await wait_for(logged, timeout=timeout, what=f"worker {self.pid} to log {name}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; its output:\n{self.output}") from None
        assert event is not None
        return event

    async def maybe_event(self, name: str, *, timeout: float) -> dict[str, Any] | None:
        """Like `wait_event`, but None at the deadline: for an expectation the scenario
        counts as a failed check (its row still goes into the table) rather than raising."""
        try:
            return await self.wait_event(name, timeout=timeout)
        except AssertionError:
            return None

    async def exited(self, *, timeout: float) -> int:
        async def gone() -> bool:
            return self.proc.poll() is not None

        await wait_for(gone, timeout=timeout, what=f"worker {self.pid} to exit", interval=0.05)
        return self.proc.returncode

    def signal(self, sig: signal.Signals) -> None:
        os.kill(self.pid, sig)

    def stop(self) -> None:
        """Tear down: SIGKILL, which ends a stopped (SIGSTOP) process too, with no SIGCONT."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._reader.join(timeout=10)


StartWorker = Callable[..., WorkerProcess]


@pytest.fixture
def start_worker(cli_env: dict[str, str]) -> Iterator[StartWorker]:
    """`start_worker(**env)` starts a worker on this test's servers and task queue, with `env`
    (e.g. `CRONWARDEN_JOBS=...`) on top; every worker started is killed at teardown."""
    started: list[WorkerProcess] = []

    def start(**env: str) -> WorkerProcess:
        worker = WorkerProcess({**cli_env, **env})
        started.append(worker)
        return worker

    yield start
    # Every worker is killed even if stopping one raises; the first error is raised after.
    errors: list[Exception] = []
    for worker in started:
        try:
            worker.stop()
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]
