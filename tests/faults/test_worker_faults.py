"""Workers killed, frozen and raced (scenarios 1-3), as `cronwarden worker` subprocesses."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path

import pytest

from cronwarden.activities.contract import ALREADY_DONE, OVERLAP_LOCKED, RAN
from cronwarden.activities.guard import GuardedRun
from tests.support.faults.counts import check
from tests.support.faults.exit_after_commit import EXIT_CODE
from tests.support.faults.one_key import OneKey
from tests.support.faults.worker_process import StartWorker
from tests.support.runs import lease_holder
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

RESULT_TIMEOUT = 90


async def test_a_worker_killed_before_commit_is_retried_elsewhere_and_applies_once(
    one_key: OneKey, start_worker: StartWorker, tmp_path: Path
) -> None:
    doomed = start_worker()
    # The job waits at a gate, so the kill lands mid-job, before any commit, every time.
    gate = tmp_path / "gate"
    handle = await one_key.start(job="gated", args={"gate": str(gate)}, lock_ttl=30)
    await doomed.wait_event("run.started", timeout=60)
    doomed.signal(signal.SIGKILL)
    await doomed.exited(timeout=10)
    gate.touch()
    # The retry needs Temporal to declare the killed attempt dead (heartbeat timeout), then
    # takes the lease over at once: same activity, later attempt, no waiting out the TTL.
    start_worker()
    outcome = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)

    checks: list[str] = []
    check(checks, (outcome.outcome, outcome.attempt) == (RAN, 2), f"retry gave {outcome}")
    check(checks, await one_key.committed_attempts() == [2], "the outbox is not the retry's")
    await one_key.tally("1a worker SIGKILL before commit", checks)
    assert await one_key.effect_attempts() == [2]


async def test_a_worker_killed_after_commit_leaves_its_retry_nothing_to_do(
    one_key: OneKey, start_worker: StartWorker
) -> None:
    # The wrap must exist only in the doomed worker, never in this process's own workers.
    assert GuardedRun._commit.__module__ == "cronwarden.activities.guard"
    doomed = start_worker(
        CRONWARDEN_JOBS="tests.support.jobs,tests.support.faults.exit_after_commit"
    )
    handle = await one_key.start(lock_ttl=30)
    code = await doomed.exited(timeout=60)
    # Committed, and Temporal never heard of it: the activity is still open there.
    committed_before_retry = await one_key.committed_attempts()
    start_worker()
    outcome = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)

    checks: list[str] = []
    check(checks, code == EXIT_CODE, f"the doomed worker exited {code}, not after a commit")
    check(checks, committed_before_retry == [1], "attempt 1 had not committed before dying")
    check(
        checks,
        (outcome.outcome, outcome.attempt) == (ALREADY_DONE, 2),
        f"the retry did not find the key done: {outcome}",
    )
    await one_key.tally("1b worker exits after COMMIT, before reporting", checks)
    assert await one_key.effect_attempts() == [1]


async def test_a_holder_frozen_at_its_commit_is_fenced_off_by_the_taker_of_its_lease(
    one_key: OneKey, start_worker: StartWorker, tmp_path: Path
) -> None:
    # The freeze lands inside attempt 1's open transaction (its effect written), right before
    # its commit statement; it lasts until attempt 2 holds the lease on another worker, where a
    # gate keeps it from committing. Thawed, the holder runs its commit statement while the
    # taker holds the lease: only the fencing check stands between it and a second effect.
    holder = start_worker(
        CRONWARDEN_JOBS="tests.support.jobs,tests.support.faults.freeze_before_commit",
        CRONWARDEN_MAX_CONCURRENT_RUNS="1",
    )
    gate = tmp_path / "gate"
    gate.touch()
    lock_ttl, timeout = 3, 6
    handle = await one_key.start(
        job="gated", args={"gate": str(gate)}, lock_ttl=lock_ttl, timeout=timeout
    )
    frozen = await holder.wait_event("test.freezing", timeout=60)
    stale_token = (await lease_holder(one_key.pool, f"schedule:{one_key.schedule_id}"))["token"]
    # Closed for the taker: it takes the lease, then waits here without committing.
    gate.unlink()
    taker = start_worker()
    await taker.wait_event("run.started", timeout=60)
    taker_token = (await lease_holder(one_key.pool, f"schedule:{one_key.schedule_id}"))["token"]
    holder.signal(signal.SIGCONT)
    thawed = await holder.maybe_event("test.thawed", timeout=30)
    # Thawed, the holder either runs its commit statement (fenced off: its events say so) or
    # learns first that Temporal cancelled its timed-out attempt; either way it loses the lease.
    # Waited for by the event both paths end with, so the taker's gate stays shut no longer.
    lost = await holder.maybe_event("run.lease-lost", timeout=30)
    returned = next(iter(holder.events("test.commit-returned")), None)
    committed_while_taker_gated = await one_key.committed_attempts()
    gate.touch()
    outcome = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)

    checks: list[str] = []
    check(checks, frozen["in_transaction"], "the holder froze outside its transaction")
    frozen_for = thawed["frozen_seconds"] if thawed else 0
    check(
        checks,
        frozen_for > max(lock_ttl, timeout),
        f"frozen {frozen_for:.1f} s, not past the TTL ({lock_ttl} s) and timeout ({timeout} s)",
    )
    check(checks, taker_token != stale_token, "the taker did not take the lease over")
    check(
        checks,
        returned is None or (not returned["fenced"] and not returned["recorded"]),
        f"the thawed holder's commit was not fenced off: {returned}",
    )
    check(checks, lost is not None, "the thawed holder did not log run.lease-lost")
    check(
        checks,
        committed_while_taker_gated == [],
        f"committed while the taker held the lease: {committed_while_taker_gated}",
    )
    # The taker is a later attempt: the second, or the third when the frozen holder's open
    # poll on the job's queue took the second and sat on it (frozen, not dead) until it
    # timed out.
    check(
        checks,
        outcome.outcome == RAN and outcome.attempt >= 2,
        f"the taker gave {outcome}",
    )
    taken = [outcome.attempt]
    check(checks, await one_key.committed_attempts() == taken, "the outbox is not the taker's")
    await one_key.tally("2a holder frozen at its commit, thawed while the taker holds", checks)
    assert await one_key.effect_attempts() == taken


async def test_a_lease_holder_frozen_past_its_lease_and_timeout_writes_nothing_once_thawed(
    one_key: OneKey, start_worker: StartWorker, tmp_path: Path
) -> None:
    # One run slot: busy with the run, the frozen worker has no activity poll open. A frozen
    # process with open polls would be handed the retries and sit on them until each timed
    # out, which only delays the takeover (by minutes, with 3 attempts) and is Temporal's.
    stale = start_worker(CRONWARDEN_MAX_CONCURRENT_RUNS="1")
    gate = tmp_path / "gate"
    # Lease TTL 3 s and start-to-close 6 s: the freeze below outlasts both.
    handle = await one_key.start(job="gated", args={"gate": str(gate)}, lock_ttl=3, timeout=6)
    await stale.wait_event("run.started", timeout=60)
    stale_token = (await lease_holder(one_key.pool, f"schedule:{one_key.schedule_id}"))["token"]
    stale.signal(signal.SIGSTOP)
    # Open for whoever runs next; the frozen holder will find it open too once thawed.
    gate.touch()
    start_worker()

    async def taken_and_committed() -> bool:
        # A later attempt than the frozen holder's (the second, or the third when the frozen
        # process's open poll took the second and sat on it until it timed out).
        attempts = await one_key.committed_attempts()
        return len(attempts) == 1 and attempts[0] >= 2

    # The retry (attempt 2) takes the lease over and commits while the holder is still frozen.
    await wait_for(taken_and_committed, timeout=60, what="another worker to commit the key")
    stale.signal(signal.SIGCONT)
    # Thawed, the stale holder learns it lost the lease at whichever comes first: its renewal,
    # its commit's fencing check, or the release after Temporal cancels the timed-out attempt.
    lost = await stale.maybe_event("run.lease-lost", timeout=30)
    outcome = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)

    checks: list[str] = []
    check(checks, outcome.outcome == RAN and outcome.attempt >= 2, f"the taker gave {outcome}")
    check(checks, lost is not None, "the stale holder did not log run.lease-lost")
    check(
        checks,
        lost is None or lost["fencing_token"] == stale_token,
        f"lease-lost of another run: {lost}",
    )
    check(checks, not stale.events("run.committed"), "the stale holder logged a commit")
    check(
        checks,
        await one_key.committed_attempts() == [outcome.attempt],
        "the outbox is not the taker's",
    )
    check(checks, stale.proc.poll() is None, "the stale worker died instead of carrying on")
    await one_key.tally("2b holder frozen mid-job, thawed after the taker committed", checks)
    assert await one_key.effect_attempts() == [outcome.attempt]


async def test_fifty_concurrent_executions_of_one_key_commit_once(
    one_key: OneKey, start_worker: StartWorker
) -> None:
    # Two worker processes, so the race is between processes, not only inside one pool.
    workers = [start_worker(), start_worker()]
    handles = await asyncio.gather(*(one_key.start(args={"sleep": 0.5}) for _ in range(50)))
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(h.result() for h in handles)), RESULT_TIMEOUT
    )
    kinds = Counter(o.outcome for o in outcomes)

    checks: list[str] = []
    check(checks, kinds[RAN] == 1, f"{kinds[RAN]} executions ran")
    check(
        checks,
        kinds[ALREADY_DONE] + kinds[OVERLAP_LOCKED] == 49,
        f"outcomes other than already-done or overlap-locked: {dict(kinds)}",
    )
    # Overlap-locked proves two executions were inside the guard at the same time.
    check(checks, kinds[OVERLAP_LOCKED] >= 1, "no execution found the key's lease held")
    outcome_events = ("run.committed", "run.already-done", "run.overlap-locked")
    idle = [w.pid for w in workers if not any(w.events(e) for e in outcome_events)]
    check(checks, not idle, f"worker processes that ran none of the executions: {idle}")
    row = await one_key.tally(
        f"3 50 concurrent runs of one key: {kinds[RAN]} ran, "
        f"{kinds[ALREADY_DONE]} already-done, {kinds[OVERLAP_LOCKED]} overlap-locked",
        checks,
    )
    assert row.outbox_rows == row.effect_rows == 1
