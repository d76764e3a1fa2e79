"""The CLI's entry module loads no SDK: each command imports what it runs (see cronwarden.cli)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("temporalio", "asyncpg", "httpx", "cronwarden.schedules.apply", "cronwarden.backfill.plan")


def test_loading_the_cli_loads_neither_temporal_nor_asyncpg_nor_a_command_body() -> None:
    probe = "import json, sys, cronwarden.cli.app; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = json.loads(done.stdout)
    heavy = [m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert heavy == [], f"`cronwarden --help` would pay for {heavy}"
