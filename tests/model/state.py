"""The state of the lease protocol's model: one lease row, its queue, the outbox, the job's
effects, the workers and every attempt of every run.

Everything is a NamedTuple of small ints and tuples: states are hashed millions of times, and a
tuple hashes fast. Time is abstracted away: a lease or a queue place is either live or
`expired`, and only the environment's steps turn it to expired.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

NONE = -1
"""No key, no token, no worker."""


class KeySpec(NamedTuple):
    """One logical key (schedule id + fire time) and the one activity that runs it."""

    name: str
    priority: int
    """0: a live fire, 1: a `backfill run` replay (store/locks.py passes `1 if replay`)."""
    wait_for_any: bool
    """Queues whoever holds the lease (replays, buffer_one fires); a live `skip` fire queues
    only behind a replay."""


LIVE = KeySpec("live", priority=0, wait_for_any=False)
REPLAY = KeySpec("replay", priority=1, wait_for_any=True)
KEYS: tuple[KeySpec, ...] = (LIVE, REPLAY)
"""Both keys run under one schedule lease; the index of a key is its run's holder id."""


def is_replay(key: int) -> bool:
    return key != NONE and KEYS[key].priority == 1


class Pc(IntEnum):
    """Where an attempt is in the guard (activities/guard.py, activities/lease.py)."""

    ASKING = 0
    """Calls acquire_lease: its first ask, or its next poll while it holds a queue place."""
    LEAVING = 1
    """Refused after it held a place: leave_queue, then it ends overlap-locked."""
    HOLDING = 2
    """Holds the lease, its job runs: renew, commit, or release after the job failed."""
    CANCELLED = 3
    """Cancelled while its acquire's answer was on the way: release_holder next."""
    CANCEL_LEAVING = 4
    """Then leave_queue, then it ends (failed, retryable)."""
    ENDED = 5
    GONE = 6
    """Its worker crashed: it never takes another step."""


class Outcome(IntEnum):
    NONE = 0
    RAN = 1
    ALREADY_DONE = 2
    OVERLAP_LOCKED = 3
    """Not retried: a fire skipped at the lease, or a wait that ran out."""
    FAILED = 4
    """Retryable: the job failed, the lease was lost, the acquire was cancelled."""


FINAL_OUTCOMES = (Outcome.RAN, Outcome.ALREADY_DONE, Outcome.OVERLAP_LOCKED)


class WorkerStatus(IntEnum):
    UP = 0
    STOPPED = 1
    """Frozen (a pause, a partition): takes no step until it resumes."""
    CRASHED = 2


class Attempt(NamedTuple):
    number: int
    """Temporal's attempt number, 1 for the first."""
    worker: int
    pc: Pc
    queued: bool
    """The wait loop's `queued`: it held a place, so it leaves the queue when it stops waiting."""
    token: int
    """The fencing token it holds (HOLDING), else NONE."""
    outcome: Outcome


class Run(NamedTuple):
    attempts: tuple[Attempt, ...]
    over: bool
    """Temporal has no attempt of it left to run: it ended, or its retries are used up."""


class Lease(NamedTuple):
    """The `cronwarden.locks` row of the schedule's lease."""

    exists: bool
    holder: int
    """The key whose activity holds it, NONE once released."""
    attempt: int
    token: int
    expired: bool
    """expires_at is past (always True once released: nothing reads it then)."""
    last_key: int
    """The `logical_key` and `taken_by` columns: the last taker's key (one activity per key
    here), kept after release: `held_for`, and the stale rule's last taker."""


NO_LEASE = Lease(exists=False, holder=NONE, attempt=0, token=0, expired=True, last_key=NONE)


class Place(NamedTuple):
    """A `cronwarden.lock_waiters` row; a state keeps them in arrival (enqueued_at) order."""

    key: int
    attempt: int
    expired: bool


class State(NamedTuple):
    lease: Lease
    places: tuple[Place, ...]
    runs: tuple[Run, ...]
    workers: tuple[WorkerStatus, ...]
    recorded: tuple[bool, ...]
    """The key's outbox record exists."""
    effects: tuple[int, ...]
    """How many times the key's job writes landed (capped at 2: two is already a violation)."""
    faults: int
    """Fault steps taken so far (bounded: see protocol.Bounds)."""


def initial_state(workers: int) -> State:
    """Both runs' first attempts started, the live fire's on worker 0, the replay's on 1."""
    runs = tuple(
        Run(attempts=(Attempt(1, key, Pc.ASKING, False, NONE, Outcome.NONE),), over=False)
        for key in range(len(KEYS))
    )
    return State(
        lease=NO_LEASE,
        places=(),
        runs=runs,
        workers=(WorkerStatus.UP,) * workers,
        recorded=(False,) * len(KEYS),
        effects=(0,) * len(KEYS),
        faults=0,
    )


def is_final(state: State) -> bool:
    """Every key is committed, or Temporal has no attempt of its run left to run."""
    return all(run.over or done for run, done in zip(state.runs, state.recorded, strict=True))


def canonical(state: State) -> State:
    """Tokens renumbered 1.. in their order: only their equality and order mean anything, and
    two states differing only in how many tokens were handed out behave the same."""
    used = {a.token for run in state.runs for a in run.attempts if a.token != NONE}
    if state.lease.exists:
        used.add(state.lease.token)
    renumber = {token: rank for rank, token in enumerate(sorted(used), start=1)}
    if all(renumber[t] == t for t in used):
        return state
    lease = state.lease
    if lease.exists:
        lease = lease._replace(token=renumber[lease.token])
    runs = tuple(
        run._replace(
            attempts=tuple(
                a if a.token == NONE else a._replace(token=renumber[a.token]) for a in run.attempts
            )
        )
        for run in state.runs
    )
    return state._replace(lease=lease, runs=runs)


def next_token(state: State) -> int:
    """`nextval('cronwarden.lock_tokens')`: larger than every token anyone holds."""
    held = [a.token for run in state.runs for a in run.attempts]
    return max([state.lease.token, *held]) + 1
