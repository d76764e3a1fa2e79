"""A TCP proxy in front of Postgres that breaks a connection exactly at its COMMIT.

The worker under test connects through it. It is the benchmarks' round-trip proxy
(`tests/support/pgwire.py`), which reads the frontend protocol message by message, with observers
that recognise asyncpg's `COMMIT;` simple query. Once armed, for the next `cuts` of them it does one
of two things:

- `before`: drops the connection without forwarding COMMIT. The server rolls the transaction
  back, the client sees its connection die: the commit did NOT land.
- `after`: forwards COMMIT, waits for the server's answer, throws the answer away and drops
  the connection. The commit DID land, and the client still sees its connection die: the case
  a guard cannot tell from the one before without looking again.
- `hold`: never forwards COMMIT, and keeps the connection open: the holder is stopped (or cut
  off by a partition) between its commit statement and COMMIT, with the lease row locked by its
  fencing check. Only the server can end that transaction (its idle timeout); when it closes
  the connection the proxy passes that on.

Everything else (renewals, reads, the acquire) passes through untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from tests.support.pgwire import RoundTripProxy, WireReader, Withhold


class _Cut(ConnectionError):
    """Raised by an observer: the proxy ends the connection before forwarding the bytes."""


def _is_commit(query_body: bytes) -> bool:
    return query_body.rstrip(b"\x00").strip().rstrip(b";").strip().upper() == b"COMMIT"


class CommitCutter(RoundTripProxy):
    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        *,
        mode: Literal["before", "after", "hold"],
    ) -> None:
        super().__init__(upstream_host, upstream_port, label=str)
        self.mode = mode
        self.cuts = 1
        """How many COMMITs to cut; the ones after pass through."""
        self.armed = False
        """COMMITs before arming pass through (and are not counted): the worker's start-up."""
        self.commits_seen = 0
        self.cut = 0
        self.answers_dropped: list[bytes] = []
        """What the server answered to each COMMIT cut in `after` mode."""

    def _observers(self) -> tuple[Callable[[bytes], None], Callable[[bytes], None] | None]:
        # Set just before a COMMIT to cut is forwarded: whatever the server sends next is its
        # answer to that COMMIT (a connection carries one request at a time).
        swallowing = False

        def on_message(kind: str, body: bytes) -> None:
            nonlocal swallowing
            if kind != "Q" or not self.armed or not _is_commit(body):
                return
            self.commits_seen += 1
            if self.cut >= self.cuts:
                return
            self.cut += 1
            if self.mode == "before":
                raise _Cut("COMMIT not forwarded")
            if self.mode == "hold":
                raise Withhold
            swallowing = True

        def from_server(data: bytes) -> None:
            if swallowing:
                self.answers_dropped.append(data)
                raise _Cut("the answer to COMMIT dropped")

        return WireReader(self._count, on_message=on_message).feed, from_server
