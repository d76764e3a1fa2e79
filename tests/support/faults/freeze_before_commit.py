"""A jobs module that freezes its worker INSIDE a run's open transaction, right before the
commit statement.

Loaded by a worker subprocess through
`CRONWARDEN_JOBS=tests.support.jobs,tests.support.faults.freeze_before_commit`. It wraps the
guard's commit step: on attempt 1 the process logs `test.freezing` and sends itself SIGSTOP,
with the job's writes made and its transaction still open. Whoever sends SIGCONT decides what
happened meanwhile; the thawed process logs `test.thawed` (how long it was frozen, measured by
itself) and then runs the real commit statement, whose outcome it logs as `test.commit-returned`.

Before freezing it stops the run's Temporal heartbeats. Thawed, a run whose attempt timed out
would otherwise be cancelled by Temporal at its next heartbeat, racing the commit statement: the
scenario is about the commit statement's fencing check, so it must be the one that answers.

For the same reason it lifts the transaction's idle timeout before freezing. While the job runs
the guard sets it to the job's timeout plus a margin, and a transaction frozen for longer is ended
by the server, whose commit statement then finds no transaction at all. A live holder can still
lose its lease while its transaction is within that timeout: the lease runs from its last renewal,
the idle timeout from the transaction's last statement, which may come later. The freeze
stretches that window so the fencing check is what stands in the way.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

from cronwarden import JobContext, job
from cronwarden.activities.guard import GuardedRun
from cronwarden.store.runs import CommitOutcome

_commit = GuardedRun._commit


def _emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


async def _freeze_then_commit(self: GuardedRun, ctx: Any, record: Any) -> CommitOutcome:
    if record.attempt != 1:
        return await _commit(self, ctx, record)
    for task in asyncio.all_tasks():
        if task.get_name() == f"heartbeat:{ctx.logical_key}":
            task.cancel()
    await ctx.conn.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
    _emit("test.freezing", logical_key=ctx.logical_key, in_transaction=ctx.in_transaction)
    frozen_at = time.monotonic()
    os.kill(os.getpid(), signal.SIGSTOP)
    _emit("test.thawed", frozen_seconds=time.monotonic() - frozen_at)
    outcome = await _commit(self, ctx, record)
    _emit("test.commit-returned", fenced=outcome.fenced, recorded=outcome.recorded)
    return outcome


# Only in a worker that loads this module as one of its jobs modules (see exit_after_commit.py).
if __name__ in (m.strip() for m in os.environ.get("CRONWARDEN_JOBS", "").split(",")):
    GuardedRun._commit = _freeze_then_commit  # type: ignore[method-assign]

    # A jobs module must register a job (a module that registers none is refused as a
    # misconfiguration): this one's job is a marker, never scheduled.
    @job("fault-freeze-before-commit")
    async def _marker(ctx: JobContext) -> None:
        return None
