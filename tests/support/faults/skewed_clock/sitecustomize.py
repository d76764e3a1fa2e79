"""A skewed wall clock for a worker subprocess: put this directory first on its PYTHONPATH and
set CRONWARDEN_TEST_CLOCK_SKEW_SECONDS. Python imports `sitecustomize` at start-up, before any
of our modules, so every `time.time()` and `datetime.now()` in the process reads the skewed clock
(libfaketime would do the same from outside, but it is not something we may require).

Honest limits: only Python code sees the skew. The Temporal SDK's Rust core (polling, activity
timeouts, the workflow clock it hands to `workflow.now()`) keeps the real clock, and so does
every server: Postgres' now() and Temporal's schedule times. That is the split that matters,
because a worker's own clock is exactly what our code must never derive keys or deadlines from.

Side effects to know about: `datetime.datetime` is replaced by a subclass, so in a module that
imports it after start-up `isinstance(x, datetime)` asks about the subclass and is False for a
plain datetime made elsewhere (by a C extension, say). And Python imports the FIRST
`sitecustomize` on its path only: this one wins because the test puts it first on PYTHONPATH,
and it shadows any `sitecustomize` of the virtualenv (there is none today). Once installed it
writes one JSON line, event `test.clock_skewed`, so a scenario can check the skew is in place.
"""

from __future__ import annotations

import datetime as _datetime
import json
import os
import sys
import time as _time
from typing import Any

_SKEW = float(os.environ.get("CRONWARDEN_TEST_CLOCK_SKEW_SECONDS", "0") or 0)


def _install(skew: float) -> None:
    real_time = _time.time
    real_time_ns = _time.time_ns
    shift = _datetime.timedelta(seconds=skew)

    def time() -> float:
        return real_time() + skew

    def time_ns() -> int:
        return real_time_ns() + int(skew * 1_000_000_000)

    class SkewedDatetime(_datetime.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return super().now(tz) + shift

        @classmethod
        def utcnow(cls) -> Any:
            return super().now(_datetime.UTC).replace(tzinfo=None) + shift

        @classmethod
        def today(cls) -> Any:
            return cls.now()

    _time.time = time
    _time.time_ns = time_ns
    _datetime.datetime = SkewedDatetime  # type: ignore[misc]
    print(json.dumps({"event": "test.clock_skewed", "skew_seconds": skew}), file=sys.stderr)


if _SKEW:
    _install(_SKEW)
