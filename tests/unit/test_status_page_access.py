"""Who may read the status page, and where its links point."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from unittest import mock

import pytest
from aiohttp.test_utils import make_mocked_request

from cronwarden.monitor import timeline
from cronwarden.monitor.page import PageAccess, StatusPage, TemporalLinks


def request_from(
    peer: str,
    authorization: str | None = None,
    *,
    host: str = "127.0.0.1:8234",
    **headers: str,
) -> object:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        (peer, 40000) if name == "peername" else default
    )
    headers = {"Host": host, **{k.replace("_", "-"): v for k, v in headers.items()}}
    if authorization:
        headers["Authorization"] = authorization
    return make_mocked_request("GET", "/", headers=headers, transport=transport)


def page(who: str = "local", token: str | None = None) -> StatusPage:
    async def no_temporal() -> None:
        return None

    return StatusPage(
        "postgresql://127.0.0.1:1/x", no_temporal, access=PageAccess(who, token), links=None
    )


@pytest.mark.parametrize("peer", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"])
def test_a_local_page_answers_loopback_clients(peer: str) -> None:
    assert page()._allowed(request_from(peer)) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("peer", ["10.1.2.3", "192.168.0.9", "2001:db8::1", "::ffff:10.0.0.1"])
def test_a_local_page_refuses_every_other_client_and_says_how_to_open_it(peer: str) -> None:
    refused = page()._allowed(request_from(peer))  # type: ignore[arg-type]
    assert refused is not None and refused.status == 403
    assert "CRONWARDEN_STATUS_PAGE=any" in (refused.text or "")


@pytest.mark.parametrize("host", ["localhost:8234", "127.0.0.1", "[::1]:9101", "LOCALHOST"])
def test_a_local_page_answers_the_names_a_browser_on_this_host_uses(host: str) -> None:
    assert page()._allowed(request_from("127.0.0.1", host=host)) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("host", ["rebound.example:8234", "10.0.0.5:9101", "cronwarden-monitor"])
def test_a_local_page_refuses_a_loopback_peer_that_names_another_host(host: str) -> None:
    # DNS rebinding in a browser here, or a proxy (a mesh sidecar) passing a remote client on.
    refused = page()._allowed(request_from("127.0.0.6", host=host))  # type: ignore[arg-type]
    assert refused is not None and refused.status == 403


@pytest.mark.parametrize("header", ["Forwarded", "X_Forwarded_For", "X_Real_IP"])
def test_a_local_page_refuses_requests_a_proxy_forwarded(header: str) -> None:
    forwarded = request_from("127.0.0.1", **{header: "for=203.0.113.9"})
    refused = page()._allowed(forwarded)  # type: ignore[arg-type]
    assert refused is not None and refused.status == 403


def test_an_open_page_answers_any_client() -> None:
    assert page("any")._allowed(request_from("10.1.2.3")) is None  # type: ignore[arg-type]


def test_a_token_is_asked_of_every_client_by_bearer_or_by_a_browsers_basic_password() -> None:
    guarded = page("any", token="t0ken")
    basic = "Basic " + base64.b64encode(b"me:t0ken").decode()
    for authorization, status in [
        (None, 401),
        ("Bearer nope", 401),
        ("Bearer t0ken", None),
        (basic, None),
        ("Basic !!!", 401),
    ]:
        refused = guarded._allowed(request_from("127.0.0.1", authorization))  # type: ignore[arg-type]
        assert (refused.status if refused else None) == status, authorization
    challenge = guarded._allowed(request_from("127.0.0.1"))  # type: ignore[arg-type]
    assert challenge is not None and "Basic" in challenge.headers["WWW-Authenticate"]


def test_slots_link_to_their_run_or_to_the_schedule_in_temporals_ui() -> None:
    links = TemporalLinks("http://ui.example:8233/", "prod ns")
    t = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    record = timeline.Record(t, t, "w", 1, "nightly-2026-12-01T12:00:00Z", "run-1", False)
    committed = timeline.Slot(t, "nightly@2026-12-01T12:00:00Z", timeline.COMMITTED, record)
    assert links.slot("nightly", committed) == (
        "http://ui.example:8233/namespaces/prod%20ns/workflows/"
        "nightly-2026-12-01T12%3A00%3A00Z/run-1/history"
    )
    running = timeline.Slot(t, "nightly@2026-12-01T12:00:00Z", timeline.RUNNING)
    url = links.slot("nightly", running)
    assert url.startswith("http://ui.example:8233/namespaces/prod%20ns/workflows?query=")
    assert "nightly-2026-12-01T12%3A00%3A00Z" in url and "nightly~replay-" in url
    missing = timeline.Slot(t, "nightly@2026-12-01T12:00:00Z", timeline.MISSING)
    assert links.slot("nightly", missing) == (
        "http://ui.example:8233/namespaces/prod%20ns/schedules/nightly"
    )
