"""The SQL statements of the lease protocol, as functions on the model's state.

Each is a transcription of one statement: `acquire_lease` of cronwarden.acquire_lease
(store/migrations/0012, which replaced 0009's), `renew`, `release`, `release_holder` and
`leave_queue` of store/locks.py, `commit` of store/runs.py's `_COMMIT` with what the guard does
around it (activities/guard.py `_commit`). A `Rules` flag switches one rule off, so the
explorer can show what that rule is for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from tests.model.state import KEYS, NONE, Lease, Place, State, is_replay, next_token


@dataclass(frozen=True)
class Rules:
    priority: bool = True
    """Live fires before replays in the queue, and a replay's retry hands a lease on to a
    waiting live fire. Off: one line in arrival order."""
    fencing: bool = True
    """The commit's fence UPDATE matches the token. Off: it matches the lease name only."""
    outbox: bool = True
    """The key's record: acquire answers `done` once it exists, and the commit's INSERT is
    unique per key (ON CONFLICT DO NOTHING rolls the job's writes back). Off: neither."""
    done_at_acquire: bool = True
    """Only the acquire's look at the outbox (the commit's unique INSERT stays)."""


FULL = Rules()


class Acquired(NamedTuple):
    """acquire_lease's row: token, done, queued, held_for, held_by_replay, took_over."""

    token: int
    """The token taken, NONE when not taken."""
    done: bool
    queued: bool
    held_for: int
    held_by_replay: bool
    took_over: bool


class Committed(NamedTuple):
    fenced: bool
    recorded: bool


Result = Acquired | Committed | bool | None


class Applied(NamedTuple):
    """A statement's answer, the state after it, and the invariant it broke (if any)."""

    result: Result
    state: State
    violation: str | None = None


def _priority(key: int, rules: Rules) -> int:
    return KEYS[key].priority if rules.priority else 0


def _ahead(state: State, key: int, rules: Rules) -> Place | None:
    """The first live place ahead of `key`'s (or of a newcomer): by priority, then arrival.
    The caller's own place, whatever its attempt, never counts."""
    mine = next((i for i, p in enumerate(state.places) if p.key == key), None)
    priority = _priority(key, rules)
    best: tuple[int, int] | None = None
    for i, place in enumerate(state.places):
        if place.key == key or place.expired:
            continue
        theirs = _priority(place.key, rules)
        if theirs < priority or (theirs == priority and (mine is None or i < mine)):
            rank = (theirs, i)
            if best is None or rank < best:
                best = rank
    return None if best is None else state.places[best[1]]


def _without_place(places: tuple[Place, ...], key: int) -> tuple[Place, ...]:
    return tuple(p for p in places if p.key != key)


def _live_fire_waiting(places: tuple[Place, ...]) -> bool:
    return any(not p.expired and not is_replay(p.key) for p in places)


def acquire_lease(state: State, key: int, attempt: int, rules: Rules) -> Applied:
    spec = KEYS[key]
    # done: the key is in the outbox, our place goes (any attempt's: the waiter is the holder).
    if rules.outbox and rules.done_at_acquire and state.recorded[key]:
        done = Acquired(NONE, True, False, NONE, False, False)
        return Applied(done, state._replace(places=_without_place(state.places, key)))
    # The row first: a new lease name starts released.
    lease = state.lease if state.lease.exists else Lease(True, NONE, 0, 0, True, NONE)
    state = state._replace(lease=lease)
    # stale: a later attempt of this same activity took the lease (held or released since:
    # `taken_by`, here `last_key`), or holds a place in line.
    later_place = any(p.key == key and p.attempt > attempt for p in state.places)
    if (lease.last_key == key and lease.attempt > attempt) or later_place:
        stale = Acquired(NONE, False, False, lease.last_key, is_replay(lease.last_key), False)
        return Applied(stale, state)

    ahead = _ahead(state, key, rules)
    active = lease.holder != NONE and not lease.expired
    retaking = lease.holder == key and lease.attempt < attempt
    priority = _priority(key, rules)

    # take
    if (not active and ahead is None) or (
        retaking and (ahead is None or _priority(ahead.key, rules) >= priority)
    ):
        token = next_token(state)
        places = _without_place(state.places, key)
        taken = state._replace(lease=Lease(True, key, attempt, token, False, key), places=places)
        took = Acquired(token, False, False, NONE, False, lease.holder != NONE)
        violation = None
        if spec.priority == 1 and _live_fire_waiting(places):
            violation = "a replay took the lease while a live fire waited in line for it"
        return Applied(took, taken, violation)

    # hand on: our dead attempt's lease is released under a new token (it is fenced).
    if retaking:
        lease = lease._replace(holder=NONE, token=next_token(state), expired=True)
        active = False
        state = state._replace(lease=lease)

    # queue
    got_place = False
    if spec.wait_for_any or (active and is_replay(lease.last_key)):
        line = list(state.places)
        mine = next((i for i, p in enumerate(line) if p.key == key), None)
        if mine is None:
            line.append(Place(key, attempt, False))
            got_place = True
        elif line[mine].attempt <= attempt:
            # A refresh keeps the place's arrival (enqueued_at is not updated).
            line[mine] = Place(key, attempt, False)
            got_place = True
        state = state._replace(places=tuple(line))

    if active:
        answer = Acquired(NONE, False, got_place, lease.last_key, is_replay(lease.last_key), False)
    else:
        held_for = ahead.key if ahead is not None else lease.last_key
        by_replay = ahead is not None and is_replay(ahead.key)
        answer = Acquired(NONE, False, got_place, held_for, by_replay, False)
    violation = None
    if spec.priority == 0 and not active and ahead is not None and is_replay(ahead.key):
        violation = "a live fire was refused a free lease because a replay was in line"
    return Applied(answer, state, violation)


def renew(state: State, token: int) -> Applied:
    """`_RENEW`: WHERE token = $2 AND holder IS NOT NULL; extends (revives) the lease."""
    lease = state.lease
    if lease.exists and lease.token == token and lease.holder != NONE:
        return Applied(True, state._replace(lease=lease._replace(expired=False)))
    return Applied(False, state)


def release(state: State, token: int) -> Applied:
    """`_RELEASE`: WHERE token = $2; a stale token changes nothing."""
    lease = state.lease
    if lease.exists and lease.token == token:
        released = lease._replace(holder=NONE, expired=True)
        return Applied(True, state._replace(lease=released))
    return Applied(False, state)


def release_holder(state: State, key: int, attempt: int) -> Applied:
    """`_RELEASE_HOLDER`: WHERE holder = $2 AND attempt = $3 (the token stays)."""
    lease = state.lease
    if lease.exists and lease.holder == key and lease.attempt == attempt:
        released = lease._replace(holder=NONE, expired=True)
        return Applied(True, state._replace(lease=released))
    return Applied(False, state)


def leave_queue(state: State, key: int, attempt: int) -> Applied:
    """`_LEAVE`: never a later attempt's place."""
    places = tuple(p for p in state.places if not (p.key == key and p.attempt <= attempt))
    return Applied(None, state._replace(places=places))


def commit(state: State, key: int, token: int, rules: Rules) -> Applied:
    """`_COMMIT` inside the job's transaction, then COMMIT or ROLLBACK as the guard decides:
    fence (releases the lease) → outbox INSERT → the job's writes land with them. Not fenced:
    rollback, nothing lands. Fenced but the key recorded already: rollback (which undoes the
    fence's release) and a release of its own."""
    lease = state.lease
    fenced = lease.exists and (lease.token == token or not rules.fencing)
    if not fenced:
        return Applied(Committed(False, False), state)
    recorded = not state.recorded[key] or not rules.outbox
    if not recorded:
        after = release(state, token).state
        return Applied(Committed(True, False), after)
    violation = None
    if lease.token != token:
        violation = "the writes of a fenced-out holder landed"
    landed = state._replace(
        lease=lease._replace(holder=NONE, expired=True),
        recorded=_set(state.recorded, key, True),
        effects=_set(state.effects, key, min(state.effects[key] + 1, 2)),
    )
    return Applied(Committed(True, True), landed, violation)


_T = TypeVar("_T")


def _set(values: tuple[_T, ...], index: int, value: _T) -> tuple[_T, ...]:
    return (*values[:index], value, *values[index + 1 :])
