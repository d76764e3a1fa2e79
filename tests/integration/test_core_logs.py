"""What the Temporal SDK's core logs while a server is away must never reach stdout, where a
`--json` command's document goes."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from cronwarden.embedded import EmbeddedTemporal
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.integration


async def test_retry_warnings_go_to_stderr_as_events_and_stdout_stays_one_json_document(
    temporal_server: EmbeddedTemporal,
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.core_log_probe",
        temporal_server.address,
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, stderr.decode()
    # The whole of stdout parses: no coloured warning line before or after the document.
    assert json.loads(stdout)["outcome"] in ("TimeoutError", "RPCError")
    events = [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]
    retries = [e for e in events if e["event"] == "temporal.core"]
    assert retries, stderr.decode()
    assert retries[0]["level"] == "warning"
    assert "retried" in retries[0]["message"]
