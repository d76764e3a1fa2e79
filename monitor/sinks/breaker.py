"""A sink's circuit breaker: how many of its deliveries may be in flight right now.

Closed, a sink that has answered gets `concurrency` sends at once; one that has not answered
yet, or whose last send failed, gets one at a time, so a sink that hangs costs one page's
attempt per send timeout, not `concurrency` of them. After `failures_to_open` failed sends in a
row (no answer, a network error, a 5xx, a refused credential) the breaker opens: nothing is sent
to the sink, its pages wait in their queue (never dropped, never dead-lettered for it, their
attempts not counted), until `cooldown` has passed. Then one probe goes out (half-open): an
answer closes the breaker, a failure opens it for another cool-down.

Pure and clocked by the caller (`now`, monotonic seconds), so every transition is a unit test.
Each monitor process has its own breakers: replicas judge a sink independently.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class State(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


@dataclass
class Breaker:
    failures_to_open: int = 3
    cooldown: float = 30.0
    failures: int = 0
    """Failed sends in a row."""
    opened_at: float | None = None
    answered: bool = False
    """The last send that ended got an answer (the sink is known to be up)."""

    def state(self, now: float) -> State:
        if self.opened_at is None:
            return State.CLOSED
        if now - self.opened_at >= self.cooldown:
            return State.HALF_OPEN
        return State.OPEN

    def allowance(self, now: float, *, concurrency: int) -> int:
        """How many sends may be in flight at `now`."""
        state = self.state(now)
        if state is State.OPEN:
            return 0
        if state is State.HALF_OPEN or not self.answered:
            return 1
        return concurrency

    def succeeded(self) -> bool:
        """The sink answered a send (whatever it thought of the page). True when that closed
        an open breaker."""
        was_open = self.opened_at is not None
        self.failures, self.opened_at, self.answered = 0, None, True
        return was_open

    def failed(self, now: float) -> bool:
        """A send failed for the sink's sake. True when that opened the breaker (from closed,
        or a failed probe starting a new cool-down)."""
        state = self.state(now)
        self.failures += 1
        self.answered = False
        if state is State.OPEN:
            return False  # a send still in flight when it opened: the cool-down stands
        if state is State.HALF_OPEN or self.failures >= self.failures_to_open:
            self.opened_at = now
            return True
        return False
