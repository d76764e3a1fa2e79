"""The one place that knows this process's secrets and blanks them out of text.

Settings hand their secret values over as they load (`remember`, before validation, so even a
refused configuration is covered); every log line and every line the CLI prints passes through
`redact`, and every error text the store keeps passes through `for_storage`. Scrubbing at the
outputs and at the writes, rather than trusting every message to leave them out, also covers
text we do not write: a driver's error quoting its DSN, an HTTP library's error quoting a
webhook URL, a job's exception quoting whatever it was configured with.

Two layers. The secrets this process was configured with are blanked wherever they appear: as
given, percent-encoded, JSON-escaped, and split by whitespace (a message wrapped across lines).
Then credentials of any origin are blanked by their shape: the password of a URL or a DSN, a
token in a query string or a `key=value` pair, an `Authorization` header, the path of a Slack,
Discord or PagerDuty integration URL. A process that was never told a secret (a worker without
the monitor's sink settings) still blanks the ones that look like credentials.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, quote_plus

MASK = "***"
# Shorter values would blank ordinary words out of messages (a password "app", a port "5432"):
# a secret that short is not protected by hiding it anyway.
_MIN_LENGTH = 6

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()


def remember(values: Iterable[str | None]) -> None:
    """Add secret values (None and short ones are ignored) to what `redact` blanks out."""
    global _secrets
    new = {v for v in values if v and len(v) >= _MIN_LENGTH}
    with _lock:
        # Longest first: a URL is blanked whole before its token alone could leave the rest.
        _secrets = tuple(sorted(new | set(_secrets), key=len, reverse=True))


def _token_of(url: str) -> str | None:
    """The last path segment of a secret URL when it looks like a token (long, letters and
    digits): a Slack webhook's, quoted alone by an error that parsed the URL."""
    if "://" not in url:
        return None
    last = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    looks_random = any(c.isdigit() for c in last) and any(c.isalpha() for c in last)
    return last if len(last) >= 12 and looks_random else None


def _spellings(secret: str) -> set[str]:
    """The ways a secret turns up in text: as is, in a URL (percent-encoded, with or without
    its slashes, or form-encoded) and inside a JSON string or a repr; a secret URL's token
    alone too."""
    token = _token_of(secret)
    return _encodings(secret) | (_encodings(token) if token is not None else set())


def _encodings(secret: str) -> set[str]:
    found = {
        secret,
        quote(secret, safe=""),
        quote(secret, safe="/"),
        quote_plus(secret),
        json.dumps(secret)[1:-1],
        repr(secret)[1:-1],
    }
    return {s for s in found if len(s) >= _MIN_LENGTH}


def _loose(spelling: str) -> str:
    """A pattern of `spelling` that also matches it with whitespace between its characters."""
    return r"\s*".join(re.escape(c) for c in spelling)


@functools.lru_cache(maxsize=4)
def _known(secrets: tuple[str, ...]) -> tuple[tuple[str, ...], re.Pattern[str] | None]:
    """Every spelling of `secrets` (whitespace dropped, for a cheap first look) and one
    pattern matching any of them anywhere, longest first."""
    spellings = sorted({s for secret in secrets for s in _spellings(secret)}, key=len, reverse=True)
    if not spellings:
        return (), None
    compact = tuple("".join(s.split()) for s in spellings)
    return compact, re.compile("|".join(_loose(s) for s in spellings))


def _blank_known(text: str) -> str:
    compact, pattern = _known(_secrets)
    if pattern is None:
        return text
    # The common case (no secret at all) costs a few substring searches, not a regex scan.
    squeezed = "".join(text.split())
    if not any(s in squeezed for s in compact):
        return text
    return pattern.sub(MASK, text)


# Names whose value is a credential, in a query string, a libpq keyword DSN, a form or a
# `key=value` log line. Only whole names: `logical_key=` or `fencing_token=` are no secrets.
_CREDENTIAL_NAMES = (
    r"(?:access_|refresh_|id_|auth_|api_|session_|security_|bearer_|x-amz-security-|"
    r"x-goog-security-|oauth_)?token"
    r"|key|api[_-]?key|apikey|x-api-key|routing[_-]?key|integration[_-]?key|private[_-]?key"
    r"|sig|signature|x-amz-signature|x-goog-signature|x-amz-credential|x-goog-credential"
    r"|[\w-]*secret|[\w-]*password|passwd|pwd|pass|auth|credentials?|sas"
)
_NAME = rf"(?:{_CREDENTIAL_NAMES})"
_VALUE_END = r"\s&#'\"<>;,)\]}"


def _userinfo(match: re.Match[str]) -> str:
    scheme, user, colon, _secret = match.group(1, 2, 3, 4)
    at = "%40" if match.group(0).endswith("%40") else "@"
    if colon:
        return f"{scheme}{user}{colon}{MASK}{at}"
    # `https://TOKEN@host`: a bare user of an HTTP URL is a token; `postgresql://app@db` is not.
    if scheme.lower().split("%")[0].split(":")[0] in ("http", "https", "ws", "wss", "git"):
        return f"{scheme}{MASK}{at}"
    return match.group(0)


# (what the lowered text must contain for the rule to apply at all, the rule, the replacement):
# most text holds none of these, and a substring search is far cheaper than a regex scan.
_Rule = tuple[tuple[str, ...], re.Pattern[str], str | Callable[[re.Match[str]], str]]

_RULES: tuple[_Rule, ...] = (
    # scheme://user:password@host (and the percent-encoded form, %3A%2F%2F ... %40).
    (
        ("://",),
        re.compile(
            r"(?i)\b([a-z][a-z0-9+.-]{0,30}://)([^\s/?#@:'\"<>]{0,256})(:?)"
            r"([^\s/?#'\"<>]{0,512})@"
        ),
        _userinfo,
    ),
    (
        ("%3a%2f%2f",),
        re.compile(
            r"(?i)\b([a-z][a-z0-9+.-]{0,30}%3A%2F%2F)((?:(?!%2F|%3A|%40)[^\s/?#@'\"<>]){0,256})"
            r"(%3A)((?:(?!%2F|%40)[^\s/?#@'\"<>]){0,512})%40"
        ),
        _userinfo,
    ),
    # ?token=..., &sig=..., password=... (libpq keyword form), 'quoted values' too.
    (
        ("=", "%3d"),
        re.compile(
            rf"(?i)(?<![\w.-])({_NAME})(\s*=\s*|%3D)(?!\*\*\*)"
            rf"('[^']*'|\"[^\"]*\"|[^{_VALUE_END}]+)"
        ),
        rf"\1\2{MASK}",
    ),
    # "routing_key": "..." in JSON, 'password': '...' in a repr.
    (
        ('"', "'"),
        re.compile(rf"(?i)([\"']{_NAME}[\"']\s*:\s*)([\"'])(?:(?!\2)[^\\]|\\.)*\2"),
        rf"\1\2{MASK}\2",
    ),
    # Authorization: Bearer ... (a header line, a dict's repr), and a bearer token anywhere.
    (
        ("authorization",),
        re.compile(
            r"(?i)((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)"
            r"(?:(bearer|basic|digest|token|apikey)\s+)?[^\s\"',;}]+"
        ),
        lambda m: f"{m.group(1)}{m.group(2) + ' ' if m.group(2) else ''}{MASK}",
    ),
    (("bearer",), re.compile(r"(?i)\b(bearer\s+)(?!\*\*\*)[a-z0-9._~+/-]{6,}=*"), rf"\1{MASK}"),
    # Integration URLs whose path is the credential.
    (
        ("hooks.slack",),
        re.compile(
            r"(?i)((?:hooks\.slack\.com|hooks\.slack-gov\.com)/(?:services|workflows|triggers)/)"
            rf"[^{_VALUE_END}?]+"
        ),
        rf"\1{MASK}",
    ),
    (
        ("/services/",),
        re.compile(r"(/services/)T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{12,}"),
        rf"\1{MASK}",
    ),
    (
        ("discord",),
        re.compile(rf"(?i)(discord(?:app)?\.com/api/webhooks/\d+/)[^{_VALUE_END}/?]+"),
        rf"\1{MASK}",
    ),
    (
        ("pagerduty.com/",),
        re.compile(
            rf"(?i)(events\.(?:eu\.)?pagerduty\.com/(?:integration|x-ere)/)[^{_VALUE_END}/?]+"
        ),
        rf"\1{MASK}",
    ),
)


def _blank_shapes(text: str) -> str:
    lowered = text.lower()
    for needles, pattern, replacement in _RULES:
        if any(needle in lowered for needle in needles):
            text = pattern.sub(replacement, text)
    return text


def redact(text: str) -> str:
    """`text` with every known secret, and every credential recognisable by its shape, blanked."""
    return _blank_shapes(_blank_known(text))


def redact_value(value: Any) -> Any:
    """`value` with every secret blanked: strings, containers, and anything whose text (an
    exception, a URL object) would quote one."""
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dict):
        return {k: redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [redact_value(v) for v in value]
    if isinstance(value, bytes | bytearray):
        value = printable(value)
    text = str(value)
    cleaned = redact(text)
    return value if cleaned == text else cleaned


def printable(text: str | bytes | bytearray) -> str:
    """Text a Postgres `text` column and a UTF-8 log line take as it is: bytes decoded (what is
    not UTF-8 shown as `\\xNN`), lone surrogates (bytes smuggled through `surrogateescape`)
    escaped, and NUL, which Postgres refuses in text, spelled out."""
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8", "backslashreplace")
    elif not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")


def storable_value(value: Any) -> Any:
    """`redact_value` for what a `jsonb` column keeps: every string `printable` too (jsonb
    refuses a NUL as text does)."""
    if isinstance(value, str | bytes | bytearray):
        return redact(printable(value))
    if isinstance(value, dict):
        return {printable(str(k)): storable_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [storable_value(v) for v in value]
    return redact_value(value)


ERROR_LIMIT = 2000
"""Characters of an error text the store keeps: enough for a sentence and its cause."""


def for_storage(text: str | bytes, *, limit: int = ERROR_LIMIT) -> str:
    """An error text as the store keeps it: scrubbed of secrets, valid in a `text` column, and
    at most `limit` characters, a cut one ending in a marker that says how much was dropped.
    Scrubbed whole before it is cut: a secret cut in half would no longer be recognised."""
    clean = redact(printable(text))
    if len(clean) <= limit:
        return clean
    # The whole length, not the part dropped: the marker's own length is then known up front.
    marker = f" … [cut: {len(clean)} characters in all]"
    return clean[: max(limit - len(marker), 0)] + marker
