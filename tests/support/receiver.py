"""A real local HTTP server standing in for the alert sinks (webhook, Slack, PagerDuty) and the
dead-man's-switch ping URL. It records every request; a test scripts its answers."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    status: int | None = None
    """What the receiver answered (None while it is holding the request)."""
    finished: bool = False
    """A trickled answer is over: written whole (status set) or cut by the sender (None)."""

    @property
    def body(self) -> Any:
        return json.loads(self.raw) if self.raw else None

    @property
    def accepted(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class Receiver:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.script: deque[int] = deque()
        """Statuses to answer, in order; 200 once it is empty."""
        self.hold = threading.Event()
        """While set, POSTs are held unanswered (then answered 503) until `release` is set."""
        self.release = threading.Event()
        self.drip: float | None = None
        """When set, a POST's answer is written one byte at a time, this many seconds apart:
        a sink that keeps every socket operation short and the whole answer long."""
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                request = Request("POST", self.path, dict(self.headers), self.rfile.read(length))
                with receiver._lock:
                    receiver.requests.append(request)
                    held = receiver.hold.is_set()
                    status = receiver.script.popleft() if receiver.script else 200
                    drip = receiver.drip
                if drip is not None:
                    self._trickle(request, status, drip)
                    return
                if held:
                    receiver.release.wait(timeout=60)
                    status = 503
                # Recorded before answering: a sender that has its answer may look at once.
                request.status = status
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    request.status = None  # the sender is gone: it never saw an answer

            def _trickle(self, request: Request, status: int, drip: float) -> None:
                answer = f"HTTP/1.1 {status} OK\r\nContent-Length: 0\r\n\r\n".encode()
                try:
                    for i in range(len(answer)):
                        self.wfile.write(answer[i : i + 1])
                        self.wfile.flush()
                        time.sleep(drip)
                except OSError:
                    request.finished = True  # the sender hung up: request.status stays None
                    return
                request.status = status
                request.finished = True

            def do_GET(self) -> None:
                request = Request("GET", self.path, dict(self.headers), b"", 200)
                with receiver._lock:
                    receiver.requests.append(request)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def at(self, path: str, *, accepted_only: bool = False) -> list[Request]:
        with self._lock:
            found = [r for r in self.requests if r.path == path]
        return [r for r in found if r.accepted] if accepted_only else found

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
