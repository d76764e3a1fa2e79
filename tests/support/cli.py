"""The `cronwarden` command run as a subprocess, the way an operator or a script runs it."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tests.support.paths import REPO_ROOT


def cronwarden_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "cronwarden", *args]


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


async def cli(env: dict[str, str], *args: str, timeout: float = 60) -> Result:
    proc = await asyncio.create_subprocess_exec(
        *cronwarden_argv("--log-json", *args),
        env=env,
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout)
    except TimeoutError:
        # Never leave a hung command behind the test that gave up on it.
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


async def cli_json(env: dict[str, str], *args: str, timeout: float = 60) -> Any:
    result = await cli(env, *args, "--json", timeout=timeout)
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


def iso(value: datetime) -> str:
    """A time as the CLI's `--start`/`--end` take it."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
