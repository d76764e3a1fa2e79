"""Real local servers standing in for alert sinks on their worst day: one that black-holes
requests (at the TCP handshake, after accepting the connection, or after answering its headers)
until it heals, and one that refuses bodies over a size with 413, as real services do.

Both speak plain HTTP/1.1 over real sockets; nothing in the monitor is replaced."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

HangMode = Literal["connect", "accept", "headers"]
HANG_MODES: tuple[HangMode, ...] = ("connect", "accept", "headers")


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    raw: bytes
    status: int | None
    """What the server answered; None for a request it held (and never answered)."""

    @property
    def body(self) -> Any:
        return json.loads(self.raw) if self.raw else None


class _Recorder:
    """What both servers keep: every request seen, by path."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._port = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._port}{path}"

    def at(self, path: str, *, accepted_only: bool = False) -> list[Seen]:
        with self._lock:
            found = [s for s in self.seen if s.path == path]
        return [s for s in found if s.status == 200] if accepted_only else found

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)


class BlackHole(_Recorder):
    """A sink that hangs every request until `heal()`, then answers 200 to new connections.

    `connect`: the handshake is never completed (the listen queue is full, so the kernel drops
    the SYN); `accept`: the connection is accepted and the request read, and nothing is ever
    answered; `headers`: the answer's status line and headers are written, its body never."""

    def __init__(self, mode: HangMode) -> None:
        super().__init__()
        self.mode = mode
        self._healed = threading.Event()
        self._closed = threading.Event()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(0 if mode == "connect" else 64)
        self._port = self._listener.getsockname()[1]
        self._fillers: list[socket.socket] = []
        self._held: list[socket.socket] = []
        self._acceptor = threading.Thread(target=self._accept, daemon=True)

    def heal(self) -> None:
        """From now on new requests are answered 200; held ones stay held."""
        self._healed.set()
        if self.mode == "connect":
            self._acceptor.start()

    def __enter__(self) -> BlackHole:
        if self.mode == "connect":
            # Fill the one-slot accept queue: every later handshake goes unanswered.
            while True:
                filler = socket.socket()
                filler.settimeout(0.2)
                try:
                    filler.connect(("127.0.0.1", self._port))
                except OSError:
                    filler.close()
                    break
                self._fillers.append(filler)
        else:
            self._acceptor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed.set()
        self._healed.set()
        self._listener.close()
        for sock in [*self._fillers, *self._held]:
            sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        try:
            request = _read_request(conn)
        except OSError:
            conn.close()
            return
        if request is None:
            conn.close()
            return
        path, headers, raw = request
        if self._healed.is_set():
            self._record(Seen(path, headers, raw, 200))
            with contextlib.suppress(OSError):
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            conn.close()
            return
        with self._lock:
            self.seen.append(Seen(path, headers, raw, None))
            self._held.append(conn)
        if self.mode == "headers":
            with contextlib.suppress(OSError):
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 64\r\n\r\n")
        # Held: never answered (or never finished) until the sender gives up or the test ends.


def _read_request(conn: socket.socket) -> tuple[str, dict[str, str], bytes] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    path = lines[0].split(" ")[1]
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip()] = value.strip()
    length = int(headers.get("Content-Length", headers.get("content-length", "0")))
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return path, headers, rest[:length]


class _RoomyServer(ThreadingHTTPServer):
    # The standard listen queue holds 5: a burst of concurrent sends from two replicas on a
    # loaded machine would overflow it, and a dropped handshake looks like a hanging sink.
    request_queue_size = 128


class SizedReceiver(_Recorder):
    """Answers 413 to a body over its path's limit (read whole first, as a proxy that buffers
    does, so the sender always sees the answer), 200 to the rest; records every request."""

    def __init__(self, limits: Mapping[str, int]) -> None:
        super().__init__()
        self.limits = dict(limits)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                limit = receiver.limits.get(self.path)
                status = 413 if limit is not None and length > limit else 200
                receiver._record(Seen(self.path, dict(self.headers), raw, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = _RoomyServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> SizedReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
