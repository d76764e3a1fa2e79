"""Carrying out the fault plan: each fault at its offset, on its own task, so faults overlap the
way they do in production (a worker killed while a backfill runs, Postgres down while a worker
is stopped). Every fault ends by itself: a stopped worker is continued, a killed one replaced, a
paused schedule unpaused, a stopped server started again, even when the soak is cancelled.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from tests.soak.plan import BACKFILL_LAG, Fault, Kind
from tests.soak.stack import Servers, Workers
from tests.support.cli import Result, cli, iso
from tests.support.faults.worker_process import WorkerProcess

# An operator retries a pause or an unpause that failed because a server was down; so do we,
# until this long has passed.
OPERATOR_RETRY_FOR = 60.0
BACKFILL_TIMEOUT = 300.0


class Restartable(Protocol):
    def stop(self, *, timeout: float = ...) -> None: ...
    def start(self, *, timeout: float = ...) -> None: ...


@dataclass
class FaultLog:
    """What the faults did, for the report and for the ledger."""

    started: float
    """`time.monotonic()` at the soak's t+0."""
    out: Callable[[str], None]
    work_dir: Path
    """Where each backfill's output is kept."""
    paused: dict[str, list[tuple[datetime, datetime]]] = field(default_factory=dict)
    """Per schedule name: the operator pauses, from just before the pause was asked to just
    after the unpause was done. Temporal's matching times ignore pauses; these are not due."""
    backfills: list[Result] = field(default_factory=list)
    paused_by_failure: dict[str, str] = field(default_factory=dict)
    """Schedules found paused at the end although every operator pause was undone, with
    Temporal's note (pause_on_failure after a failed run)."""
    problems: list[str] = field(default_factory=list)
    """A fault that could not be carried out (e.g. an unpause that kept failing)."""

    def say(self, text: str) -> None:
        self.out(f"[t+{time.monotonic() - self.started:6.1f}s] {text}")


@dataclass
class FaultRunner:
    servers: Servers
    workers: Workers
    env: dict[str, str]
    schedule_ids: dict[str, str]
    """Schedule name in the plan -> schedule id in Temporal."""
    log: FaultLog
    _server_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def run(self, plan: list[Fault]) -> None:
        async with asyncio.TaskGroup() as group:
            for fault in plan:
                group.create_task(self._at(fault), name=f"fault:{fault.describe()}")

    async def _at(self, fault: Fault) -> None:
        await asyncio.sleep(max(0.0, self.log.started + fault.at - time.monotonic()))
        try:
            await self._do(fault)
        except Exception as exc:
            # One fault that could not be carried out is reported; the others go on.
            self.log.problems.append(f"{fault.describe()}: {type(exc).__name__}: {exc}")
            self.log.say(f"{fault.kind} failed: {type(exc).__name__}: {exc}")

    async def _do(self, fault: Fault) -> None:
        match fault.kind:
            case Kind.KILL:
                await self._kill(fault)
            case Kind.STOP:
                await self._stop(fault)
            case Kind.RESTART_TEMPORAL:
                await self._restart(fault, "Temporal", self.servers.temporal)
            case Kind.RESTART_POSTGRES:
                await self._restart(fault, "Postgres", self.servers.postgres)
            case Kind.PAUSE:
                await self._pause(fault)
            case Kind.BACKFILL:
                await self._backfill(fault)

    async def _kill(self, fault: Fault) -> None:
        assert fault.target is not None
        worker = self.workers.slots[fault.target]
        if worker.proc.poll() is not None:
            # Killed by an earlier fault, its replacement not started yet: a reaped pid may
            # already belong to another process, so it gets no signal.
            self.log.say(f"{fault.target} is not running (killed): nothing to kill")
            return
        self.workers.down.add(fault.target)
        try:
            worker.signal(signal.SIGKILL)
            await worker.exited(timeout=10)
            self.log.say(f"killed {fault.target} (pid {worker.pid})")
            await asyncio.sleep(fault.seconds)
            new = self.workers.replace(fault.target)
            self.log.say(f"started {fault.target} again (pid {new.pid})")
        finally:
            self.workers.down.discard(fault.target)

    async def _stop(self, fault: Fault) -> None:
        assert fault.target is not None
        worker: WorkerProcess = self.workers.slots[fault.target]
        if worker.proc.poll() is not None:
            self.log.say(f"{fault.target} is not running (killed): nothing to stop")
            return
        worker.signal(signal.SIGSTOP)
        self.log.say(f"stopped {fault.target} (pid {worker.pid}) for {fault.seconds}s")
        try:
            await asyncio.sleep(fault.seconds)
        finally:
            # Killed meanwhile by another fault: nothing left to continue.
            if worker.proc.poll() is None:
                worker.signal(signal.SIGCONT)
                self.log.say(f"continued {fault.target} (pid {worker.pid})")

    async def _restart(self, fault: Fault, name: str, server: Restartable) -> None:
        async with self._server_lock:
            await asyncio.to_thread(server.stop)
            self.log.say(f"{name} stopped for {fault.seconds}s")
            try:
                await asyncio.sleep(fault.seconds)
            finally:
                await asyncio.to_thread(server.start)
                self.log.say(f"{name} started again")

    async def _pause(self, fault: Fault) -> None:
        assert fault.target is not None
        sid = self.schedule_ids[fault.target]
        before = datetime.now(UTC)
        await self._operator(["schedules", "pause", sid, "--reason", "soak"], what="pause")
        self.log.say(f"paused {fault.target} for {fault.seconds}s")
        try:
            await asyncio.sleep(fault.seconds)
        finally:
            try:
                await self._operator(["schedules", "unpause", sid], what="unpause")
            finally:
                # Recorded even if the unpause failed for good: the schedule stayed paused
                # from here on, which the report shows as a problem.
                self.log.paused.setdefault(fault.target, []).append((before, datetime.now(UTC)))
        self.log.say(f"unpaused {fault.target}")

    async def _operator(self, args: list[str], *, what: str) -> None:
        give_up_at = time.monotonic() + OPERATOR_RETRY_FOR
        while True:
            result = await cli(self.env, *args)
            if result.code == 0:
                return
            if time.monotonic() > give_up_at:
                raise RuntimeError(f"{what} kept failing: {result.stderr.strip()[-300:]}")
            await asyncio.sleep(1.0)

    async def _backfill(self, fault: Fault) -> None:
        assert fault.target is not None
        sid = self.schedule_ids[fault.target]
        # A past window: the fires of the last seconds are still the live runs' own.
        end = datetime.fromtimestamp(time.time() - BACKFILL_LAG, UTC)
        start = datetime.fromtimestamp(end.timestamp() - fault.seconds, UTC)
        self.log.say(f"backfill run {fault.target} from {iso(start)} to {iso(end)}")
        # The soak's own faults pause schedules (an operator's pause, Temporal's pause after a
        # failed run); the replays under test run through them, as they did before pauses
        # were refused by default.
        args = [
            "backfill", "run", sid, "--start", iso(start), "--end", iso(end), "--yes",
            "--include-paused",
        ]  # fmt: skip
        give_up_at = time.monotonic() + OPERATOR_RETRY_FOR
        while True:
            result = await cli(self.env, *args, "--json", timeout=BACKFILL_TIMEOUT)
            self.log.backfills.append(result)
            output = self.log.work_dir / f"backfill-{len(self.log.backfills)}.out"
            output.write_text(
                f"{' '.join(args)}\nexit {result.code}\n{result.stdout}\n{result.stderr}"
            )
            summary = backfill_summary(result)
            self.log.say(f"backfill run {fault.target}: exit {result.code}, {summary}")
            # Refused before it replayed anything (a server was down): the operator runs the
            # same command again, so the replays still meet the live fires.
            if _json_object(result.stdout) is not None or time.monotonic() > give_up_at:
                return
            await asyncio.sleep(1.0)


def backfill_summary(result: Result) -> str:
    """What `backfill run --json` did, in one line; its error when it printed no summary."""
    data = _json_object(result.stdout)
    if data is None or "summary" not in data:
        return f"no summary printed: {result.stderr.strip()[-300:]}"
    counts = data.get("summary") or {}
    text = ", ".join(f"{k} {v}" for k, v in counts.items())
    failed = [f"{f['logical_key']}: {f['error']}" for f in data.get("failed", [])]
    return text + "".join(f"; failed {f}" for f in failed[:3])


def _json_object(stdout: str) -> dict[str, Any] | None:
    """The first JSON object that starts a line. The Temporal SDK's core logs its gRPC retries
    to stdout while a server is down, so `--json` output can come after such lines."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"^\{", stdout, re.MULTILINE):
        try:
            data, _ = decoder.raw_decode(stdout, match.start())
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return None
