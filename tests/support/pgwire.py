"""Count Postgres round trips for real: a TCP proxy in front of the server that reads the
client's side of the wire protocol.

A round trip is one message the client then waits on: a Sync (the end of an extended-protocol
batch: Parse/Bind/Execute) or a simple Query. Each is labelled by the first statement it ran, so
a count can be broken down (acquire, outbox check, commit, pool reset, ...). asyncpg prepares a
statement the first time a connection sees it (Parse + Describe + Sync, a round trip of its
own); those are labelled `prepare: ...` and are the warm-up a benchmark leaves out.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections import Counter
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104


def _cstrings(payload: bytes, count: int) -> list[str]:
    parts = payload.split(b"\0", count)
    return [p.decode("utf-8", "replace") for p in parts[:count]]


class WireReader:
    """Parses the client-to-server byte stream of ONE connection, message by message."""

    def __init__(
        self,
        on_round_trip: Callable[[str], None],
        *,
        on_message: Callable[[str, bytes], None] | None = None,
    ) -> None:
        # Sees every message after startup (type, body), before it is interpreted.
        self._on_message = on_message
        self._buf = bytearray()
        self._started = False
        self._statements: dict[str, str] = {}
        self._batch: list[str] = []
        self._parsed = False
        self._on_round_trip = on_round_trip

    def feed(self, data: bytes) -> None:
        self._buf += data
        while True:
            if not self._started:
                if len(self._buf) < 8:
                    return
                (length,) = struct.unpack("!I", self._buf[:4])
                if len(self._buf) < length:
                    return
                (code,) = struct.unpack("!I", self._buf[4:8])
                # An SSL or GSS request comes before the real startup message.
                self._started = code not in (_SSL_REQUEST, _GSSENC_REQUEST)
                del self._buf[:length]
                continue
            if len(self._buf) < 5:
                return
            kind = chr(self._buf[0])
            (length,) = struct.unpack("!I", self._buf[1:5])
            if len(self._buf) < 1 + length:
                return
            payload = bytes(self._buf[5 : 1 + length])
            del self._buf[: 1 + length]
            self._message(kind, payload)

    def _message(self, kind: str, payload: bytes) -> None:
        if self._on_message is not None:
            self._on_message(kind, payload)
        if kind == "P":
            name, query = _cstrings(payload, 2)
            self._statements[name] = query
            self._batch.append(query)
            self._parsed = True
        elif kind == "B":
            _portal, name = _cstrings(payload, 2)
            self._batch.append(self._statements.get(name, "?"))
        elif kind == "Q":
            (query,) = _cstrings(payload, 1)
            self._on_round_trip(query)
        elif kind == "S":
            first = self._batch[0] if self._batch else "sync"
            # Parse without Bind: asyncpg preparing a statement before its first execution.
            prepare_only = self._parsed and len(self._batch) == 1
            self._on_round_trip(("prepare: " if prepare_only else "") + first)
            self._batch.clear()
            self._parsed = False


class RoundTripProxy:
    """Forwards connections to a Postgres server and counts their round trips by label."""

    def __init__(self, target_host: str, target_port: int, *, label: Callable[[str], str]) -> None:
        self._target = (target_host, target_port)
        self._label = label
        self.counts: Counter[str] = Counter()
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def reset(self) -> None:
        self.counts.clear()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self._port = self._server.sockets[0].getsockname()[1]

    def proxied(self, dsn: str) -> str:
        """`dsn` (of the server this proxies), pointed at the proxy."""
        if self._port is None:
            raise RuntimeError("the proxy is not started")
        return via_proxy(dsn, self._port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _count(self, query: str) -> None:
        self.counts[self._label(query)] += 1

    def _observers(
        self,
    ) -> tuple[Callable[[bytes], None] | None, Callable[[bytes], None] | None]:
        """What sees one connection's client bytes and server bytes, each before it is
        forwarded. An observer that raises ConnectionError ends the connection there."""
        return WireReader(self._count).feed, None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        from_client, from_server = self._observers()
        pumps = [
            asyncio.create_task(_pump(reader, up_writer, from_client)),
            asyncio.create_task(_pump(up_reader, writer, from_server)),
        ]
        for task in pumps:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        # Either side closing ends the connection.
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for task in pumps:
            task.cancel()
        for w in (writer, up_writer):
            with contextlib.suppress(OSError):
                w.close()


class Withhold(Exception):
    """Raised by an observer: the bytes it was shown, and every later byte of that direction,
    are read and never forwarded, while the connection stays open. The other side sees a peer
    that stopped talking, as with a process stopped (SIGSTOP) or a network partition."""


async def _pump(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    observe: Callable[[bytes], None] | None,
) -> None:
    withholding = False
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while data := await reader.read(65536):
            if withholding:
                continue
            if observe is not None:
                try:
                    observe(data)
                except Withhold:
                    withholding = True
                    continue
            writer.write(data)
            await writer.drain()


def via_proxy(dsn: str, port: int) -> str:
    """The same DSN, pointed at the proxy, without TLS (the proxy reads the plain protocol)."""
    parts = urlsplit(dsn)
    netloc = parts.netloc.rsplit("@", 1)
    userinfo = netloc[0] + "@" if len(netloc) == 2 else ""
    query = "&".join(q for q in (parts.query, "sslmode=disable") if q)
    return urlunsplit(parts._replace(netloc=f"{userinfo}127.0.0.1:{port}", query=query))


def target_of(dsn: str) -> tuple[str, int]:
    parts = urlsplit(dsn)
    return parts.hostname or "127.0.0.1", parts.port or 5432
