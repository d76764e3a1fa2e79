"""`cronwarden` itself, with one difference: the schedule's creation time comes from
BENCH_SCHEDULE_CREATED_AT.

`backfill plan` clamps its window to the schedule's creation (no fire was due before it), and a
benchmark's schedule was created seconds ago, so a year-long window would plan nothing. Moving
the creation time back is the only change: settings, connections, the plan and its printing
are the command's own, so the process's time and peak memory are what a user's would be.
"""

from __future__ import annotations

import os
from datetime import datetime

from cronwarden.cli import main
from schedules.backfill import ManagedSchedule

if __name__ == "__main__":
    created_at = datetime.fromisoformat(os.environ["BENCH_SCHEDULE_CREATED_AT"])
    # A dataclass property, replaced on the class for this process only.
    setattr(ManagedSchedule, "created_at", property(lambda _: created_at))  # noqa: B010
    main()
