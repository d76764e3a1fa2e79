"""The one place that knows this process's secrets and blanks them out of text.

Settings hand their secret values over as they load (`remember`, before validation, so even a
refused configuration is covered); every log line and every line the CLI prints passes through
`redact`. Scrubbing the known values at the outputs, rather than trusting every message to
leave them out, also covers text we do not write: a driver's error quoting its DSN, an HTTP
library's error quoting a webhook URL.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

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


def redact(text: str) -> str:
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


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
    text = str(value)
    cleaned = redact(text)
    return value if cleaned == text else cleaned
