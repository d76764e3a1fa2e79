"""`cronwarden` itself, with one difference: the schedule's creation time comes from
BENCH_SCHEDULE_CREATED_AT.

`backfill plan` clamps its window to the schedule's creation (no fire was due before it), and a
benchmark's schedule was created seconds ago, so a year-long window would plan nothing. Moving
the creation time back is the only change: settings, connections, the plan and its printing
are the command's own, so the process's time and peak memory are what a user's would be.

With BENCH_PEAK_RSS_FILE set, the process writes its own peak RSS (MiB) there as it exits: the
parent's wait4 cannot tell it (bench/cpu.py, `own_peak_rss_mib`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import NoReturn

from bench.cpu import own_peak_rss_mib
from cronwarden.backfill.plan import ManagedSchedule
from cronwarden.cli import app as cli


def _leave_writing_peak_rss(path: Path) -> Callable[[int], NoReturn]:
    leave = cli.leave

    def leave_after_writing(code: int) -> NoReturn:
        # After the command's last output, as it ends: the peak is what the whole run reached.
        # (The command leaves through os._exit, so atexit would never run.)
        try:
            path.write_text(f"{own_peak_rss_mib()}\n")
        finally:
            leave(code)

    return leave_after_writing


if __name__ == "__main__":
    created_at = datetime.fromisoformat(os.environ["BENCH_SCHEDULE_CREATED_AT"])
    # A dataclass property, replaced on the class for this process only.
    setattr(ManagedSchedule, "created_at", property(lambda _: created_at))  # noqa: B010
    if peak_file := os.environ.get("BENCH_PEAK_RSS_FILE"):
        cli.leave = _leave_writing_peak_rss(Path(peak_file))  # type: ignore[assignment]
    cli.main()
