"""Alert sinks. Each renders the sink-neutral message (`monitor.messages`) into its service's
format and POSTs it; a non-2xx answer or a network error raises `SinkError`.

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
from collections.abc import Mapping
from typing import Any, Protocol

import httpx

USER_AGENT = "cronwarden-monitor"
# A refusal of the payload itself: sending the same body again can never succeed. Only these are
# given up on; every other answer is retried, since a page must never be dropped for a failure
# that ends (408/425/429 ask the sender to come back later, like a server error does).
_REFUSED_PAYLOAD = frozenset({400, 413, 422})
# The address or credentials are wrong: a revoked Slack webhook, a rotated PagerDuty routing key,
# a receiver behind a load balancer that answers 404 during a deploy. Fixing the settings (or the
# deploy ending) lets the very same page through, so it is retried, and reported loudly.
_CONFIGURATION = frozenset({401, 403, 404, 410})


class SinkError(Exception):
    """Delivery failed; the message says how, without the URL."""

    def __init__(
        self, message: str, *, permanent: bool = False, misconfigured: bool = False
    ) -> None:
        super().__init__(message)
        self.permanent = permanent
        """The sink refused this payload for good (400, 413, 422): retrying cannot help."""
        self.misconfigured = misconfigured
        """The sink's URL or credentials look wrong: retried, but an operator must act."""


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


def status_error(status: int) -> SinkError:
    """How a non-2xx answer fails a send: given up on only for a payload the sink can never
    accept; retried for everything else."""
    if status in _CONFIGURATION:
        return SinkError(f"HTTP {status}: check the sink's URL and credentials", misconfigured=True)
    return SinkError(f"HTTP {status}", permanent=status in _REFUSED_PAYLOAD)


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
            raise SinkError(f"no answer within {round(timeout, 1):g}s") from None
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
    http: Http, sink: Sink, message: Mapping[str, Any], *, delivery_id: str, timeout: float
) -> None:
    body = sink.render(message)
    headers = {"Content-Type": "application/json", **sink.headers(body, delivery_id=delivery_id)}
    await http.request("POST", sink.url(), timeout=timeout, body=body, headers=headers)


async def ping(http: Http, url: str, *, timeout: float) -> None:
    """GET a dead-man's-switch URL (healthchecks.io and the like)."""
    await http.request("GET", url, timeout=timeout)
