"""`cronwarden worker` subprocesses."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.cli import cronwarden_argv
from tests.support.paths import REPO_ROOT


def start_worker_process(
    env: dict[str, str],
    *,
    graceful: float = 30,
    health_port: int | None = None,
    cwd: Path = REPO_ROOT,
) -> subprocess.Popen[bytes]:
    """A worker logging JSON to a pipe (stderr folded in): the caller must keep reading it."""
    health = ["--health-port", str(health_port)] if health_port else []
    return subprocess.Popen(
        cronwarden_argv("--log-json", "worker", *health),
        env={**env, "CRONWARDEN_GRACEFUL_SHUTDOWN_SECONDS": str(graceful)},
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
