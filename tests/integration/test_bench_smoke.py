"""`python -m bench --quick` (what `make bench ARGS=--quick` runs) boots its own stack, runs
every measurement at tiny sizes and prints one table with every metric row. Nothing about
speed is asserted: the point is that the scripts keep working as the code changes."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from bench.__main__ import MODULES
from bench.fire_lag import PHASES
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.integration

# The rows of each measurement at --quick sizes, by metric (the table's cells are stripped, so
# an indented row is listed without its indent). A measurement prints every row whatever it
# found ("-" where there is nothing), so this set never depends on timing.
EXPECTED = {
    "guard_overhead": [
        "guarded runs/s, no-op job (20 runs x 1 rounds, medians; "
        "ratio = median of the per-round ratios)",
        "CPU of this process per run, ms (worker + client; ratio = bare / guarded)",
        "Postgres round trips per guarded run",
        "of which",
        "Temporal DescribeSchedule calls per guarded run (steady state, cached next fires)",
    ],
    "backfill_plan": [
        "backfill plan, 1,440 keys, 1,370 done: in process",
        *(
            f"`cronwarden {command}`, 1,440 keys, 1,370 done: {figure}"
            for command in (
                "backfill plan --json",
                "backfill run --dry-run",
                "audit",
                "audit --json",
            )
            for figure in ("wall time", "peak RSS")
        ),
        "`cronwarden backfill run --dry-run --json`, 1,440 keys, none done: wall time",
        "`cronwarden backfill run --dry-run --json`, 1,440 keys, none done: peak RSS",
    ],
    "monitor_scan": [
        "monitor overdue query: 10,000 rows, 1.0% overdue (100)",
        "monitor overdue query: 1,000 rows, 0.1% overdue (1)",
        "monitor overdue query: 1,000 rows, 1.0% overdue (10)",
        "monitor overdue query: 10,000 rows, 0.1% overdue (10)",
        "overdue query, 10 overdue either way: 10,000 vs 1,000 rows",
        "overdue query, 10,000 rows: 100 vs 10 overdue",
    ],
    "paging": [
        "fleet page to pagerduty, 500 schedules overdue: bytes",
        "fleet page to slack, 500 schedules overdue: bytes",
        "fleet page to webhook, 500 schedules overdue: bytes",
        "fleet page, 500 schedules: the pass that opened and sent it",
        "10 PagerDuty triggers delivered, webhook black-holed vs healthy (pass every 3 s, "
        "send timeout 2 s)",
        "a new incident's PagerDuty trigger delivered, webhook black-holed vs healthy (pass "
        "every 3 s, send timeout 2 s)",
        "sends to the black-holed webhook in that run (11 pages queued)",
    ],
    "outbox_scale": [
        "outbox 100k: live fire: lease + commit, 2 round trips",
        "outbox 100k: live fires, 8 at once",
        "outbox 100k: guard's done? look of an old key",
        "outbox 100k: pages read: a done key's record",
        "outbox 100k: pages read: a key not done yet (every month)",
        "outbox 100k: backfill plan's outbox read, one schedule's day",
        "outbox 100k: monitor: partition upkeep",
        "outbox 100k: status timelines, 10 schedules",
        "outbox 100k: disk per million fires",
        "outbox 10k: generated in",
        "outbox 10k: oldest month dropped while fires commit",
        "outbox 100k: generated in",
        "outbox 100k: oldest month dropped while fires commit",
        "outbox 10k: converted online by migrate in",
        "outbox 10k: longest fire while converting",
        "outbox 100k: converted online by migrate in",
        "outbox 100k: longest fire while converting",
    ],
    "status_page": [
        "status page `/`: 60 schedules, page 1 of 1, read afresh (median of 1)",
        "status page `/`: 60 schedules, page 1 of 1: bytes (its first 5 timelines full, "
        "30 slots each)",
        "status page `/`: 60 schedules, page 1 of 1: monitor memory added by 20 concurrent loads",
        "status page `/`: 60 schedules, page 1 of 1: `/healthz` during the 20 loads, median / max",
        "status page `/`: 60 schedules, page 1 of 1: schedules created in Temporal by 20 "
        "concurrent loads",
        "status page `/schedules/{id}`: one schedule, 120 slots, read afresh",
    ],
    "apply_scale": [
        "apply 20 schedules: first apply (creates; 1 run)",
        "apply 20 schedules again, no change: time",
        "apply 20 schedules again, no change: Temporal writes",
    ],
    "scale": [
        "30 schedules: first apply (1 run)",
        "30 schedules: apply again, no change (1 run)",
        "30 schedules: `schedules list --json` (1 run)",
        "30 schedules: Temporal's ListSchedules alone, all pages (1 run)",
        "30 schedules: `status --json` (1 run)",
        "30 schedules: one monitor pass over their heartbeats",
        "`backfill plan` of one schedule (1 day, minutely) with 30 others",
        "Temporal's matching times of that plan alone, with 30 others",
        "Postgres: definition history and outbox per page of that plan alone, with 30 others",
    ],
    "fire_lag": [
        "fires run (3 schedules every 10s for 20s)",
        "fire lag to job start, p50 / p99",
        "fire lag to activity start, p50 / p99",
        "cronwarden's share: activity start to commit, p50 / p99",
        *(f"{phase}, p50 / p99" for phase, _, _ in PHASES),
        "Temporal server CPU per fire / worker CPU per fire",
        f"burst floor: server + worker CPU of 3 fires / {os.cpu_count() or 1} cores",
    ],
    "zones": [
        "spec of */5 * * * * in Australia/Lord_Howe, 4 years compiled: entries / bytes",
        "compile */5 * * * * in Australia/Lord_Howe for apply (median of 3)",
        "Temporal lists 2 days of */5 * * * * fire times: compiled Australia/Lord_Howe vs UTC cron",
    ],
}


def table_rows(stdout: str) -> dict[str, list[str]]:
    """Metric -> the row's other cells, from the Markdown table (header and rule skipped)."""
    lines = [line for line in stdout.splitlines() if line.startswith("| ")]
    cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in lines[1:]]
    return {row[0]: row[1:] for row in cells}


async def test_the_quick_benchmark_runs_every_measurement_and_prints_one_table() -> None:
    present = [m for m in MODULES if (REPO_ROOT / "bench" / f"{m}.py").exists()]
    unlisted = sorted(set(present) - set(EXPECTED))
    assert not unlisted, f"add the --quick metric rows of {unlisted} to EXPECTED"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONWARDEN_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench",
        "--quick",
        cwd=Path(REPO_ROOT),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    # A guard against a hang, not a speed goal: alone the quick run takes about two minutes,
    # beside the rest of the suite on two cores it has taken over four.
    out, err = await asyncio.wait_for(proc.communicate(), timeout=600)
    stdout, stderr = out.decode(), err.decode()
    assert proc.returncode == 0, stderr

    rows = table_rows(stdout)
    expected = [metric for m in present for metric in EXPECTED[m]]
    assert sorted(rows) == sorted(expected), stdout
    # Only what is not a speed is judged in --quick mode (an index scan, zero writes to
    # Temporal): a FAIL there is a regression.
    assert not [m for m, cells in rows.items() if cells[-1] == "FAIL"], stdout
    assert "Traceback" not in stderr
