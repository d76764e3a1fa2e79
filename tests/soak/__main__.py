"""`python -m tests.soak [--seed N] [--duration S]` (`make soak`): the randomized soak on its own
servers. Prints the seed and the fault plan first, the table last; exits 1 on a failed verdict.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
from pathlib import Path

from cronwarden import logs
from tests.soak.runner import Report, SoakConfig, run_soak
from tests.soak.stack import own_servers
from tests.support.database import create_test_database

QUICK_DURATION = 30.0
DATABASE = "soak"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    parser.add_argument("--seed", type=int, help="Replay this fault plan (default: a new one).")
    parser.add_argument("--duration", type=float, default=180.0, help="Seconds of faults.")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_DURATION:g}s of faults (what `make test` runs).",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        help="Keep servers' and workers' logs here (default: a temp dir, "
        "kept only when the verdict fails).",
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    duration = QUICK_DURATION if args.quick else args.duration
    # The servers' own progress lines would bury the soak's; warnings still show.
    logs.configure(level="WARNING")
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="cronwarden-soak-"))
    report = asyncio.run(_soak(SoakConfig(seed=seed, duration=duration), work_dir))
    print()
    print(report.render())
    verdict = "pass" if report.passed else "FAIL"
    print(f"\nsoak verdict: {verdict} (seed {seed}; replay with --seed {seed})")
    if report.passed and args.work_dir is None:
        shutil.rmtree(work_dir, ignore_errors=True)
    else:
        print(f"logs: {work_dir}")
    return 0 if report.passed else 1


async def _soak(config: SoakConfig, work_dir: Path) -> Report:
    with own_servers(work_dir) as servers:
        database = await create_test_database(servers.postgres, DATABASE)
        return await run_soak(config, servers=servers, database=database, work_dir=work_dir)


if __name__ == "__main__":
    sys.exit(main())
