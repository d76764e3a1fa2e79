"""A jobs module that makes its worker die right after a run's COMMIT.

Loaded by a worker subprocess through
`CRONWARDEN_JOBS=tests.support.jobs,tests.support.faults.exit_after_commit`. Loaded that way, it
wraps the guard's commit step: once the commit transaction has landed (the outbox record and the
job's writes are durable), the process exits at once, so the activity's result never reaches
Temporal. That is the window between COMMIT and the activity completion, where a scheduler that
trusts only its own bookkeeping would run the fire a second time. The wrap lives here, in test
code: production has no hook for it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from cronwarden import JobContext, job
from cronwarden.activities.guard import GuardedRun
from cronwarden.store.runs import CommitOutcome

EXIT_CODE = 86
"""Distinct from a signal's exit, so the test can tell this exit from any other death."""

_commit = GuardedRun._commit


async def _commit_then_exit(self: GuardedRun, ctx: Any, record: Any) -> CommitOutcome:
    outcome = await _commit(self, ctx, record)
    if outcome.fenced and outcome.recorded:
        event = {"event": "test.exit-after-commit", "logical_key": ctx.logical_key}
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()
        os._exit(EXIT_CODE)
    return outcome


# Only in a worker that loads this module as one of its jobs modules: a test that imports it
# for EXIT_CODE must not turn its own process into one that dies at its next commit.
if __name__ in (m.strip() for m in os.environ.get("CRONWARDEN_JOBS", "").split(",")):
    GuardedRun._commit = _commit_then_exit  # type: ignore[method-assign]

    # A jobs module must register a job (a module that registers none is refused as a
    # misconfiguration): this one's job is a marker, never scheduled.
    @job("fault-exit-after-commit")
    async def _marker(ctx: JobContext) -> None:
        return None
