"""`python -m bench [--quick] [--only NAME ...] [--repeat N] [--write-results]`

Boots one embedded stack, runs every measurement module in order on it and prints one table.
`--quick` runs tiny sizes so the scripts never rot (tests/integration/test_bench_smoke.py): its
figures mean nothing and no speed goal is judged. `--write-results` writes bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import platform
import sys
import textwrap
import time
import traceback
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

from bench.stack import DEFAULT_REPEAT, BenchStack, boot
from bench.table import Row, render
from cronwarden.embedded.temporal import _temporal_binary
from cronwarden.logs import configure
from cronwarden.store.pool import connect

# The measurements. Each is `bench/<name>.py` with
# `async def measure(stack: BenchStack, *, quick: bool) -> list[Row]`. `scale` comes last: the
# server goes on tearing down its ten thousand deleted schedules for minutes after it returns.
MODULES = (
    "guard_overhead",
    "backfill_plan",
    "monitor_scan",
    "paging",
    "status_page",
    "apply_scale",
    "outbox_scale",
    "fire_lag",
    "zones",
    "scale",
)
RESULTS = Path(__file__).with_name("RESULTS.md")

Measure = Callable[..., Awaitable[list[Row]]]


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"bench.{name}")
    except ModuleNotFoundError as exc:
        # Only the module itself being absent is skipped; a missing import inside it is a bug.
        if exc.name != f"bench.{name}":
            raise
        return None


async def _run_one(stack: BenchStack, name: str, module: ModuleType) -> list[Row] | None:
    """The module's rows; None when it crashed (its traceback is on stderr)."""
    measure: Measure = module.measure
    started = time.monotonic()
    try:
        rows = await measure(stack, quick=stack.quick)
    except Exception:
        traceback.print_exc()
        return None
    print(f"{name}: {time.monotonic() - started:.1f} s", file=sys.stderr)
    return rows


def _memory_gib() -> str:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return "unknown"


async def _versions(stack: BenchStack) -> tuple[str, str]:
    conn = await connect(stack.postgres.dsn())
    try:
        postgres: str = await conn.fetchval("SHOW server_version")
    finally:
        await conn.close()
    proc = await asyncio.create_subprocess_exec(
        str(_temporal_binary()), "--version", stdout=asyncio.subprocess.PIPE
    )
    temporal, _ = await proc.communicate()
    return postgres, temporal.decode().strip() or "unknown"


async def _machine(stack: BenchStack, load: tuple[float, float, float]) -> list[str]:
    postgres, temporal = await _versions(stack)
    return [
        f"- cores: {os.cpu_count()}, RAM: {_memory_gib()}, "
        f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        f"- {platform.platform()}",
        f"- Python {platform.python_version()}, Postgres {postgres}, {temporal}",
    ]


def _results_text(
    *, started: datetime, machine: list[str], ran: list[str], repeat: int, table: str
) -> str:
    intro = (
        f"`make bench` on {started:%Y-%m-%d %H:%M} UTC, on the embedded stack (a local Temporal "
        "dev server and Postgres). One machine, one run: read the ratios, not the absolute "
        f"times. Each figure is the median of {repeat} runs unless its row says otherwise."
    )
    return "\n".join(
        [
            "# Benchmark results",
            "",
            textwrap.fill(intro, width=96),
            "",
            *machine,
            f"- measurements: {', '.join(ran)}",
            "",
            table,
            "",
        ]
    )


async def run(args: argparse.Namespace) -> int:
    names = args.only or list(MODULES)
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        print(
            f"error: unknown measurement {unknown[0]!r} (known: {', '.join(MODULES)})",
            file=sys.stderr,
        )
        return 2
    if args.write_results and args.quick:
        print(
            "error: --write-results needs a full run: --quick figures mean nothing",
            file=sys.stderr,
        )
        return 2
    # Only what goes wrong: `apply` alone logs one line per schedule.
    configure(level="WARNING")
    if args.full:
        os.environ["CRONWARDEN_BENCH_FULL"] = "1"  # read by bench/outbox_scale.py
    load = os.getloadavg()
    started = datetime.now(UTC)
    modules: list[tuple[str, ModuleType]] = []
    for name in names:
        module = _load(name)
        if module is None:
            print(f"note: bench/{name}.py is not there yet: skipped", file=sys.stderr)
        else:
            modules.append((name, module))
    repeat = args.repeat or (1 if args.quick else DEFAULT_REPEAT)
    rows: list[Row] = []
    crashed = False
    async with boot(repeat=repeat, quick=args.quick) as stack:
        for name, module in modules:
            found = await _run_one(stack, name, module)
            # One broken measurement must not hide the others' rows; the exit code says it.
            if found is None:
                crashed = True
                found = [Row(metric=f"{name}: crashed (traceback above)", ours="-", met=False)]
            rows += found
        machine = await _machine(stack, load)
    table = render(rows)
    print(table)
    if args.write_results:
        RESULTS.write_text(
            _results_text(
                started=started,
                machine=machine,
                ran=[n for n, _ in modules],
                repeat=repeat,
                table=table,
            )
        )
        print(f"wrote {RESULTS.name}", file=sys.stderr)
    return 1 if crashed else 0


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="Boot the embedded stack and print one table."
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, no speed verdicts")
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help=f"run only these ({', '.join(MODULES)})"
    )
    parser.add_argument(
        "--repeat", type=int, help=f"timed runs per figure (default {DEFAULT_REPEAT}, quick 1)"
    )
    parser.add_argument("--write-results", action="store_true", help="write bench/RESULTS.md")
    parser.add_argument("--full", action="store_true", help="outbox_scale at 100M rows, not 10M")
    sys.exit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
