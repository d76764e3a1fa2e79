"""Every step the model can take from a state: the guard's statements (named after the SQL
they run), Temporal's (an attempt declared dead, a retry started) and the environment's (a lease
or a queue place expiring, a worker stopping, resuming or crashing).

A step is a `fault` when a run could not count on it never happening again and again: a crash,
a stop, a failing job, a lost answer, a wait that runs out, renewals that fail. The progress
check asks that a final state stays reachable once faults stop; time passing for a run that is
not renewing, resuming, and Temporal's retries are not faults.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from tests.model import statements
from tests.model.state import (
    FINAL_OUTCOMES,
    KEYS,
    NONE,
    Attempt,
    Outcome,
    Pc,
    Run,
    State,
    WorkerStatus,
    canonical,
)
from tests.model.statements import Acquired, Committed, Result, Rules


@dataclass(frozen=True)
class Bounds:
    workers: int = 3
    retries: int = 2
    """Temporal starts at most this many attempts after the first, for each run."""
    crashes: int = 1
    """Workers that may crash for good."""
    stopped: int = 1
    """Workers stopped at one time."""
    faults: int = 2
    """Fault steps in one execution, crashes included: every state is explored, but only
    executions with at most this many faults."""


class Step(NamedTuple):
    name: str
    key: int = NONE
    attempt: int = 0
    worker: int = NONE
    fault: bool = False


class Transition(NamedTuple):
    step: Step
    result: Result
    state: State
    violation: str | None = None


_ACTIVE = (Pc.ASKING, Pc.LEAVING, Pc.HOLDING, Pc.CANCELLED, Pc.CANCEL_LEAVING)


def successors(state: State, rules: Rules, bounds: Bounds) -> list[Transition]:
    found: list[Transition] = []
    for key, run in enumerate(state.runs):
        for index, attempt in enumerate(run.attempts):
            if attempt.pc in _ACTIVE and state.workers[attempt.worker] == WorkerStatus.UP:
                found.extend(_attempt_steps(state, key, index, attempt, rules, bounds))
        found.extend(_temporal_steps(state, key, bounds))
    found.extend(_environment_steps(state, bounds))
    return [
        t._replace(state=canonical(_counted(t.state) if t.step.fault else t.state))
        for t in found
        if not (t.step.fault and state.faults >= bounds.faults)
    ]


def _counted(state: State) -> State:
    return state._replace(faults=state.faults + 1)


def _attempt_steps(
    state: State, key: int, index: int, attempt: Attempt, rules: Rules, bounds: Bounds
) -> Iterator[Transition]:
    here = Step("", key, attempt.number, attempt.worker)
    if attempt.pc == Pc.ASKING:
        applied = statements.acquire_lease(state, key, attempt.number, rules)
        got = applied.result
        assert isinstance(got, Acquired)
        after = applied.state
        if got.done:
            after = _end(after, key, index, Outcome.ALREADY_DONE, bounds)
        elif got.token != NONE:
            after = _set_attempt(after, key, index, pc=Pc.HOLDING, token=got.token)
        elif got.queued:
            after = _set_attempt(after, key, index, queued=True)
        elif attempt.queued:
            after = _set_attempt(after, key, index, pc=Pc.LEAVING)
        else:
            after = _end(after, key, index, Outcome.OVERLAP_LOCKED, bounds)
        yield Transition(here._replace(name="acquire_lease"), got, after, applied.violation)
        # The same statement, its answer lost to a cancellation: the guard does not know what
        # it got, and releases by holder (activities/lease.py `_release_after_cancel`).
        lost = _set_attempt(applied.state, key, index, pc=Pc.CANCELLED)
        yield Transition(
            here._replace(name="acquire_lease (answer lost)", fault=True),
            got,
            lost,
            applied.violation,
        )
        if attempt.queued:
            left = statements.leave_queue(state, key, attempt.number)
            gave_up = _end(left.state, key, index, Outcome.OVERLAP_LOCKED, bounds)
            yield Transition(
                here._replace(name="leave_queue (wait ran out)", fault=True), None, gave_up
            )
    elif attempt.pc == Pc.LEAVING:
        left = statements.leave_queue(state, key, attempt.number)
        yield Transition(
            here._replace(name="leave_queue"),
            None,
            _end(left.state, key, index, Outcome.OVERLAP_LOCKED, bounds),
        )
    elif attempt.pc == Pc.HOLDING:
        yield from _holding_steps(state, key, index, attempt, here, rules, bounds)
    elif attempt.pc == Pc.CANCELLED:
        released = statements.release_holder(state, key, attempt.number)
        after = _set_attempt(released.state, key, index, pc=Pc.CANCEL_LEAVING)
        yield Transition(here._replace(name="release_holder"), released.result, after)
    elif attempt.pc == Pc.CANCEL_LEAVING:
        left = statements.leave_queue(state, key, attempt.number)
        yield Transition(
            here._replace(name="leave_queue"),
            None,
            _end(left.state, key, index, Outcome.FAILED, bounds),
        )


def _holding_steps(
    state: State, key: int, index: int, attempt: Attempt, here: Step, rules: Rules, bounds: Bounds
) -> Iterator[Transition]:
    lease = state.lease
    # A renewal that finds its lease current and live changes nothing: no step.
    if lease.token != attempt.token or lease.holder == NONE or lease.expired:
        renewed = statements.renew(state, attempt.token)
        after = renewed.state
        if renewed.result is False:
            # The renewal task cancels the job: lease lost, nothing released, retried.
            after = _end(after, key, index, Outcome.FAILED, bounds)
        yield Transition(here._replace(name="renew"), renewed.result, after)
    committed = statements.commit(state, key, attempt.token, rules)
    outcome = committed.result
    assert isinstance(outcome, Committed)
    if outcome.fenced and outcome.recorded:
        ended = Outcome.RAN
    elif outcome.fenced:
        ended = Outcome.ALREADY_DONE
    else:
        ended = Outcome.FAILED
    yield Transition(
        here._replace(name="commit"),
        outcome,
        _end(committed.state, key, index, ended, bounds),
        committed.violation,
    )
    released = statements.release(state, attempt.token)
    yield Transition(
        here._replace(name="release (the job failed)", fault=True),
        released.result,
        _end(released.state, key, index, Outcome.FAILED, bounds),
    )


def _temporal_steps(state: State, key: int, bounds: Bounds) -> Iterator[Transition]:
    run = state.runs[key]
    if run.over:
        return
    latest = run.attempts[-1]
    dead = latest.pc == Pc.GONE or (
        latest.pc in _ACTIVE and state.workers[latest.worker] == WorkerStatus.STOPPED
    )
    retry = latest.pc == Pc.ENDED and latest.outcome == Outcome.FAILED
    if not (dead or retry):
        return
    if len(run.attempts) > bounds.retries:
        over = _set_run(state, key, run._replace(over=True))
        yield Transition(Step("temporal: attempt declared dead, no retry left", key), None, over)
        return
    earlier = run.attempts
    if latest.pc == Pc.ENDED:
        # Temporal has read its outcome: nothing about it matters any more.
        earlier = (*earlier[:-1], _forgotten(latest))
    # The next worker up after the last attempt's, round the ring: attempts of one run go to
    # different workers, and never to one that is stopped or gone.
    count = len(state.workers)
    ring = [(latest.worker + n) % count for n in range(1, count + 1)]
    worker = next((w for w in ring if state.workers[w] == WorkerStatus.UP), None)
    if worker is None:
        return
    started = Attempt(latest.number + 1, worker, Pc.ASKING, False, NONE, Outcome.NONE)
    name = "temporal: next attempt" if retry else "temporal: attempt declared dead, next"
    yield Transition(
        Step(name, key, latest.number + 1, worker),
        None,
        _set_run(state, key, run._replace(attempts=(*earlier, started))),
    )


def _environment_steps(state: State, bounds: Bounds) -> Iterator[Transition]:
    crashed = sum(1 for status in state.workers if status == WorkerStatus.CRASHED)
    stopped = sum(1 for status in state.workers if status == WorkerStatus.STOPPED)
    for worker, status in enumerate(state.workers):
        busy = any(
            a.worker == worker and a.pc in _ACTIVE for run in state.runs for a in run.attempts
        )
        if status == WorkerStatus.STOPPED:
            yield Transition(
                Step("resume", worker=worker), None, _set_worker(state, worker, WorkerStatus.UP)
            )
        if status == WorkerStatus.UP and busy and stopped < bounds.stopped:
            yield Transition(
                Step("stop", worker=worker, fault=True),
                None,
                _set_worker(state, worker, WorkerStatus.STOPPED),
            )
        if status != WorkerStatus.CRASHED and busy and crashed < bounds.crashes:
            yield Transition(Step("crash", worker=worker, fault=True), None, _crash(state, worker))
    lease = state.lease
    if lease.holder != NONE and not lease.expired:
        holder = state.runs[lease.holder].attempts[lease.attempt - 1]
        renewing = (
            holder.pc == Pc.HOLDING
            and holder.token == lease.token
            and state.workers[holder.worker] == WorkerStatus.UP
        )
        yield Transition(
            Step("expire lease", lease.holder, lease.attempt, fault=renewing),
            None,
            state._replace(lease=lease._replace(expired=True)),
        )
    for i, place in enumerate(state.places):
        if place.expired:
            continue
        # A place outlives its waiter's last poll by the queue TTL; a waiter that holds its
        # place and polls refreshes it.
        refreshed = any(
            a.pc == Pc.ASKING
            and a.queued
            and a.number >= place.attempt
            and state.workers[a.worker] == WorkerStatus.UP
            for a in state.runs[place.key].attempts
        )
        if not refreshed:
            places = (*state.places[:i], place._replace(expired=True), *state.places[i + 1 :])
            yield Transition(
                Step("expire queue place", place.key, place.attempt),
                None,
                state._replace(places=places),
            )


def _crash(state: State, worker: int) -> State:
    runs = tuple(
        run._replace(
            attempts=tuple(
                a._replace(pc=Pc.GONE, queued=False, token=NONE)
                if a.worker == worker and a.pc in _ACTIVE
                else a
                for a in run.attempts
            )
        )
        for run in state.runs
    )
    return _set_worker(state._replace(runs=runs), worker, WorkerStatus.CRASHED)


def _end(state: State, key: int, index: int, outcome: Outcome, bounds: Bounds) -> State:
    """The attempt returns (or raises) to Temporal. Only the latest attempt's outcome counts;
    an attempt Temporal already gave up on is forgotten."""
    run = state.runs[key]
    latest = index == len(run.attempts) - 1
    attempt = run.attempts[index]
    ended = attempt._replace(pc=Pc.ENDED, queued=False, token=NONE, outcome=outcome)
    if not latest:
        ended = _forgotten(ended)
    attempts = (*run.attempts[:index], ended, *run.attempts[index + 1 :])
    over = run.over
    if latest and (outcome in FINAL_OUTCOMES or attempt.number > bounds.retries):
        over = True
    return _set_run(state, key, run._replace(attempts=attempts, over=over))


def _forgotten(attempt: Attempt) -> Attempt:
    return Attempt(attempt.number, NONE, Pc.ENDED, False, NONE, Outcome.NONE)


def _set_attempt(
    state: State,
    key: int,
    index: int,
    *,
    pc: Pc | None = None,
    token: int | None = None,
    queued: bool | None = None,
) -> State:
    run = state.runs[key]
    attempt = run.attempts[index]
    changed = attempt._replace(
        pc=attempt.pc if pc is None else pc,
        token=attempt.token if token is None else token,
        queued=attempt.queued if queued is None else queued,
    )
    attempts = (*run.attempts[:index], changed, *run.attempts[index + 1 :])
    return _set_run(state, key, run._replace(attempts=attempts))


def _set_run(state: State, key: int, run: Run) -> State:
    return state._replace(runs=(*state.runs[:key], run, *state.runs[key + 1 :]))


def _set_worker(state: State, worker: int, status: WorkerStatus) -> State:
    workers = list(state.workers)
    workers[worker] = status
    return state._replace(workers=tuple(workers))


def describe(step: Step, result: Result) -> str:
    """One line of a trace: who did what, and what the statement answered."""
    who = ""
    if step.key != NONE:
        who = f"{KEYS[step.key].name}#{step.attempt}" if step.attempt else KEYS[step.key].name
    if step.worker != NONE:
        who = f"{who} on w{step.worker}" if who else f"w{step.worker}"
    return f"{who}: {step.name}{_answer(result)}" if who else f"{step.name}{_answer(result)}"


def _answer(result: Result) -> str:
    if result is None:
        return ""
    if isinstance(result, Acquired):
        if result.done:
            return " → done"
        if result.token != NONE:
            return " → took the lease" + (" (took it over)" if result.took_over else "")
        held = KEYS[result.held_for].name if result.held_for != NONE else "nobody"
        return f" → not taken ({'queued' if result.queued else 'not queued'}, held for {held})"
    if isinstance(result, Committed):
        if not result.fenced:
            return " → fenced out, rolled back"
        return " → recorded, writes landed" if result.recorded else " → key done, rolled back"
    return f" → {result}"
