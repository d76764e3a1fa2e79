"""A TCP proxy in front of Postgres that breaks a connection exactly at its COMMIT.

The worker under test connects through it. The proxy reads the frontend protocol (an untyped
startup phase, then `type byte + int32 length + body` messages) and recognises asyncpg's
`COMMIT;` simple query. For the next `cuts` of them it does one of two things:

- `before`: drops the connection without forwarding COMMIT. The server rolls the transaction
  back, the client sees its connection die: the commit did NOT land.
- `after`: forwards COMMIT, waits for the server's answer, throws the answer away and drops
  the connection. The commit DID land, and the client still sees its connection die: the case
  a guard cannot tell from the one before without looking again.

Everything else (renewals, reads, the acquire) passes through untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Literal

# Request codes that may come before the real startup message (each answered by one byte).
_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104


def _is_commit(query_body: bytes) -> bool:
    return query_body.rstrip(b"\x00").strip().rstrip(b";").strip().upper() == b"COMMIT"


@dataclass
class _Connection:
    swallow_replies: bool = False
    """Set just before a COMMIT to cut is forwarded: whatever the server sends next is its
    answer to that COMMIT (a connection carries one request at a time)."""


@dataclass
class CommitCutter:
    upstream_host: str
    upstream_port: int
    mode: Literal["before", "after"]
    cuts: int = 1
    """How many COMMITs to cut; the ones after pass through."""
    commits_seen: int = 0
    cut: int = 0
    answers_dropped: list[bytes] = field(default_factory=list)
    """What the server answered to each COMMIT cut in `after` mode."""
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> int:
        """Listen on a free loopback port; returns it."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._serve(client_r, client_w))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        except OSError:
            client_w.close()
            return
        conn = _Connection()
        pumps = [
            asyncio.create_task(self._frontend(conn, client_r, up_w)),
            asyncio.create_task(self._backend(conn, up_r, client_w)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            # abort(), not close(): a cut connection must not flush anything more.
            for writer in (client_w, up_w):
                writer.transport.abort()

    async def _frontend(
        self, conn: _Connection, reader: asyncio.StreamReader, upstream: asyncio.StreamWriter
    ) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            starting = True
            while True:
                if starting:
                    head = await reader.readexactly(4)
                    body = await reader.readexactly(int.from_bytes(head, "big") - 4)
                    message = head + body
                    starting = int.from_bytes(body[:4], "big") in (_SSL_REQUEST, _GSSENC_REQUEST)
                else:
                    kind = await reader.readexactly(1)
                    head = await reader.readexactly(4)
                    body = await reader.readexactly(int.from_bytes(head, "big") - 4)
                    message = kind + head + body
                    if kind == b"Q" and _is_commit(body):
                        self.commits_seen += 1
                        if self.cut < self.cuts:
                            self.cut += 1
                            if self.mode == "before":
                                return
                            conn.swallow_replies = True
                upstream.write(message)
                await upstream.drain()

    async def _backend(
        self, conn: _Connection, upstream: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await upstream.read(65536):
                if conn.swallow_replies:
                    self.answers_dropped.append(data)
                    return
                client.write(data)
                await client.drain()
