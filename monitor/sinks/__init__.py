"""Alert sinks. Each renders the sink-neutral message (`monitor.messages`) into its service's
format and POSTs it; a non-2xx answer or a network error raises `SinkError`.

HTTP goes through the standard library in a thread: one POST per page does not justify an HTTP
client dependency, and urllib speaks HTTPS with the system's CA store. URLs and secrets are
never put into an error or a log line (a Slack webhook URL is itself a credential).
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, Protocol

USER_AGENT = "cronwarden-monitor"


class SinkError(Exception):
    """Delivery failed; the message says how, without the URL."""


class Sink(Protocol):
    @property
    def name(self) -> str: ...

    def render(self, message: Mapping[str, Any]) -> bytes: ...

    def headers(self, body: bytes, *, delivery_id: str) -> dict[str, str]: ...

    def url(self) -> str: ...


def failure(exc: BaseException) -> str:
    """What may be logged of a failed delivery: a SinkError's own text (written to hold no
    secret), of anything else only its type (its message may quote a URL)."""
    return str(exc) if isinstance(exc, SinkError) else type(exc).__name__


def json_body(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def _post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
    # Everything, the Request too, inside the try: urllib's errors (a URL without a scheme
    # raises ValueError) quote the URL, and a Slack webhook URL is itself a secret. Only the
    # exception's type and the HTTP status ever leave here.
    try:
        request = urllib.request.Request(url, data=body, method="POST")
        request.add_header("Content-Type", "application/json")
        request.add_header("User-Agent", USER_AGENT)
        for name, value in headers.items():
            request.add_header(name, value)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status: int = response.status
            response.read()
    except urllib.error.HTTPError as exc:
        raise SinkError(f"HTTP {exc.code}") from None
    except Exception as exc:
        raise SinkError(type(exc).__name__) from None
    if not 200 <= status < 300:
        raise SinkError(f"HTTP {status}")
    return status


async def send(sink: Sink, message: Mapping[str, Any], *, delivery_id: str, timeout: float) -> None:
    body = sink.render(message)
    headers = sink.headers(body, delivery_id=delivery_id)
    await asyncio.to_thread(_post, sink.url(), body, headers, timeout)


async def ping(url: str, *, timeout: float) -> None:
    """GET a dead-man's-switch URL (healthchecks.io and the like)."""

    def get() -> None:
        try:
            request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
            with urllib.request.urlopen(request, timeout=timeout) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            raise SinkError(f"HTTP {exc.code}") from None
        except Exception as exc:
            raise SinkError(type(exc).__name__) from None

    await asyncio.to_thread(get)
