"""Alert sinks. Each renders the sink-neutral message (`monitor.messages`) into its service's
format and POSTs it; a non-2xx answer or a network error raises `SinkError`.

Every sink has a largest body it takes (`max_body`: PagerDuty's and Slack's documented limits, a
setting for the webhook). A page is fitted under it before it is sent (`fit`), and a 413 answer
lowers the limit below the refused body and sends a smaller one at once: a page too large for
its sink is shortened, never given up on.

HTTP goes through one long-lived httpx client per monitor (connections are reused between
passes) and every request has a TOTAL deadline: httpx's own timeouts, like urllib's, bound each
socket operation, so a sink that trickles its answer (or a DNS lookup that hangs) could
otherwise hold a send for ever, past its claim, and another replica would send it again. URLs
and secrets are never put into an error or a log line (a Slack webhook URL is itself a
credential).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from cronwarden.monitor.messages import compacted

USER_AGENT = "cronwarden-monitor"
# A refusal of the payload itself: sending the same body again can never succeed. Only these are
# given up on; every other answer is retried, since a page must never be dropped for a failure
# that ends (408/425/429 ask the sender to come back later, like a server error does). 413 is
# not one of them: the same page, shorter, gets through (see `send`).
_REFUSED_PAYLOAD = frozenset({400, 422})
_TOO_LARGE = 413
# The address or credentials are wrong: a revoked Slack webhook, a rotated PagerDuty routing key,
# a receiver behind a load balancer that answers 404 during a deploy. Fixing the settings (or the
# deploy ending) lets the very same page through, so it is retried, and reported loudly.
_CONFIGURATION = frozenset({401, 403, 404, 410})


class SinkError(Exception):
    """Delivery failed; the message says how, without the URL."""

    def __init__(
        self,
        message: str,
        *,
        permanent: bool = False,
        misconfigured: bool = False,
        too_large: bool = False,
        timed_out: bool = False,
    ) -> None:
        super().__init__(message)
        self.permanent = permanent
        """The sink refused this payload for good (400, 422): retrying cannot help."""
        self.misconfigured = misconfigured
        """The sink's URL or credentials look wrong: retried, but an operator must act."""
        self.too_large = too_large
        """The sink refused the body's size (413): a smaller body may get through."""
        self.timed_out = timed_out
        """No answer within the send's deadline: the sink may hang."""

    @property
    def sink_failed(self) -> bool:
        """The sink itself failed (no answer, an error, a 5xx, a refused credential), as
        opposed to refusing this one page: what a sink's circuit breaker counts."""
        return not (self.permanent or self.too_large)


class Sink(Protocol):
    @property
    def name(self) -> str: ...

    def render(self, message: Mapping[str, Any]) -> bytes: ...

    def headers(self, body: bytes, *, delivery_id: str) -> dict[str, str]: ...

    def url(self) -> str: ...

    @property
    def max_body(self) -> int:
        """The largest body, in bytes, the sink's service takes."""
        ...


def failure(exc: BaseException) -> str:
    """What may be logged of a failed delivery: a SinkError's own text (written to hold no
    secret), of anything else only its type (its message may quote a URL)."""
    return str(exc) if isinstance(exc, SinkError) else type(exc).__name__


def json_body(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def status_error(status: int) -> SinkError:
    """How a non-2xx answer fails a send: given up on only for a payload the sink can never
    accept; retried for everything else."""
    if status in _CONFIGURATION:
        return SinkError(f"HTTP {status}: check the sink's URL and credentials", misconfigured=True)
    if status == _TOO_LARGE:
        return SinkError(f"HTTP {status}", too_large=True)
    return SinkError(f"HTTP {status}", permanent=status in _REFUSED_PAYLOAD)


@dataclass
class BodyLimit:
    """The largest body a sink is sent: its documented (or configured) limit, lowered below
    every body it refused with 413. One per sink and monitor process, so a receiver's smaller
    limit, once learned, costs one refused send, not one per page."""

    configured: int
    learned: int | None = None

    @property
    def bytes(self) -> int:
        return self.configured if self.learned is None else min(self.configured, self.learned)

    def refused(self, size: int) -> None:
        self.learned = size - 1 if self.learned is None else min(self.learned, size - 1)


@dataclass(frozen=True)
class Fitted:
    body: bytes
    shortest: bool
    """No shorter version of the page exists."""


def fit(sink: Sink, message: Mapping[str, Any], *, limit: BodyLimit) -> Fitted:
    """The sink's body of the largest version of `message` (`messages.compacted`) within the
    limit. Under a limit learned from a 413, the shortest version goes out even when it is
    larger (the receiver's answer decides; a page is never held back by a guess). A configured
    limit under even the shortest version raises a SinkError that is retried, never given up
    on, and reported as a configuration problem."""
    versions = list(compacted(message))
    for i, candidate in enumerate(versions):
        body = sink.render(candidate)
        if len(body) <= limit.bytes:
            return Fitted(body, shortest=i == len(versions) - 1)
    if len(body) <= limit.configured:
        return Fitted(body, shortest=True)
    raise SinkError(
        f"the page is {len(body):,} bytes at its shortest, over the {limit.configured:,} "
        "bytes this sink is configured to take: raise the limit",
        misconfigured=True,
    )


class Http:
    """The monitor's HTTP client: one connection pool for every send and ping of a process."""

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None

    def _get_client(self) -> httpx.AsyncClient:
        if self._client is None:
            # Proxy settings from the environment (HTTPS_PROXY, NO_PROXY) are honoured, as
            # urllib did: a monitor's egress may have to go through one.
            self._client = httpx.AsyncClient(
                headers={"User-Agent": USER_AGENT}, follow_redirects=False
            )
        return self._client

    async def request(
        self,
        method: str,
        url: str,
        *,
        timeout: float,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> int:
        """The answer's status, within `timeout` seconds in all (DNS, connect, send, answer)."""
        if timeout <= 0:
            raise SinkError("no time left in this pass")
        # Everything inside the try: httpx's errors may quote the URL, and a Slack webhook URL is
        # itself a secret. Only the exception's type and the HTTP status ever leave here.
        try:
            async with asyncio.timeout(timeout):
                response = await self._get_client().request(
                    method,
                    url,
                    content=body,
                    headers=dict(headers or {}),
                    timeout=httpx.Timeout(timeout),
                )
        except TimeoutError:
            raise SinkError(f"no answer within {round(timeout, 1):g}s", timed_out=True) from None
        except Exception as exc:
            raise SinkError(type(exc).__name__) from None
        if not 200 <= response.status_code < 300:
            raise status_error(response.status_code)
        return response.status_code

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


async def send(
    http: Http,
    sink: Sink,
    message: Mapping[str, Any],
    *,
    delivery_id: str,
    timeout: float,
    limit: BodyLimit | None = None,
) -> int:
    """POST the message, fitted under `limit` (default: the sink's own), within `timeout`
    seconds in all; the bytes sent. A 413 lowers `limit` below the refused body and sends a
    shorter version at once, within the same timeout (the row's claim covers one timeout); a
    413 to the shortest version fails the send, to be retried later like any failure."""
    limit = limit if limit is not None else BodyLimit(sink.max_body)
    deadline = time.monotonic() + timeout
    while True:
        fitted = fit(sink, message, limit=limit)
        headers = {
            "Content-Type": "application/json",
            **sink.headers(fitted.body, delivery_id=delivery_id),
        }
        try:
            await http.request(
                "POST",
                sink.url(),
                timeout=deadline - time.monotonic(),
                body=fitted.body,
                headers=headers,
            )
        except SinkError as exc:
            if not exc.too_large:
                raise
            limit.refused(len(fitted.body))
            if fitted.shortest:
                raise SinkError(
                    f"HTTP 413 to the page at its shortest ({len(fitted.body):,} bytes): "
                    "check the receiver's body size limit",
                    misconfigured=True,
                ) from None
            continue
        return len(fitted.body)


async def ping(http: Http, url: str, *, timeout: float) -> None:
    """GET a dead-man's-switch URL (healthchecks.io and the like)."""
    await http.request("GET", url, timeout=timeout)
