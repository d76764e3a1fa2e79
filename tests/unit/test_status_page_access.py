"""Who may read the status page, and where its links point."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from unittest import mock

import pytest
from aiohttp.test_utils import make_mocked_request
from multidict import MultiDict

from cronwarden.monitor import timeline
from cronwarden.monitor.page import PageAccess, StatusPage, TemporalLinks, clip, page_number


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


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec_Fetch_Site": "cross-site"},
        {"Sec_Fetch_Site": "CROSS-SITE"},
        {"Origin": "http://attacker.example"},
        {"Origin": "http://127.0.0.1:9999"},
        {"Origin": "null"},
        {"Origin": "http://[::1"},
    ],
)
def test_a_cross_site_request_is_refused_in_every_access_mode(headers: dict[str, str]) -> None:
    for who in ("local", "any"):
        refused = page(who)._allowed(request_from("127.0.0.1", **headers))  # type: ignore[arg-type]
        assert refused is not None and refused.status == 403, (who, headers)
        assert "cross-site" in (refused.text or "")


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec_Fetch_Site": "same-origin"},
        {"Sec_Fetch_Site": "none"},
        {"Origin": "http://127.0.0.1:8234"},
        {"Origin": "HTTP://127.0.0.1:8234"},
    ],
)
def test_a_request_from_the_page_itself_or_typed_in_is_answered(headers: dict[str, str]) -> None:
    assert page()._allowed(request_from("127.0.0.1", **headers)) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "authorization",
    [
        "Basic " + base64.b64encode(b"me:\xff\xfe").decode(),
        "Basic ÿÿ",
    ],
)
def test_a_credential_that_is_not_utf8_is_refused_not_an_error(authorization: str) -> None:
    refused = page("any", token="t0ken")._allowed(request_from("127.0.0.1", authorization))  # type: ignore[arg-type]
    assert refused is not None and refused.status == 401


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, 1),
        ({"page": "3"}, 3),
        ({"page": "007"}, 7),
        ({"page": "99999999999999999999"}, 99999999999999999999),
        ({"page": "0"}, 400),
        ({"page": "-1"}, 400),
        ({"page": "+2"}, 400),
        ({"page": " 2"}, 400),
        ({"page": "\uff12"}, 400),  # a fullwidth two, which int() takes
        ({"page": "9" * 31}, 400),
        ({"page": ""}, 400),
    ],
)
def test_a_page_number_is_ascii_digits_from_one(query: dict[str, str], expected: int) -> None:
    found = page_number(MultiDict(query))
    assert (found if isinstance(found, int) else found.status) == expected


def test_a_page_named_twice_is_refused() -> None:
    found = page_number(MultiDict([("page", "1"), ("page", "2")]))
    assert not isinstance(found, int) and found.status == 400


def test_long_texts_are_clipped_with_their_length() -> None:
    assert clip("short") == "short"
    clipped = clip("x" * 1000, 10)
    assert clipped.startswith("x" * 10 + "…") and "1,000 characters" in clipped
