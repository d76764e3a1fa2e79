"""The "monitor cannot reach the database" alert: when to send its trigger and its resolve.

There is no database to keep this alert in, so its state lives in a small file beside the
monitor (and in memory): a restarted monitor, or a `monitor --once` on the same host, knows an
alert is open, does not page again for it, and is the one that resolves it once it sees the
database healthy. The decisions are pure functions of that state and a clock reading: the
monotonic clock's (`clock()`), which the state file shares between the processes of a host. A
reading earlier than the last page's (a reboot reset the clock, or a wall clock given instead
was stepped back) counts as long ago: the alert pages again rather than going quiet.

The rules: the first failed pass after a quiet spell pages; while the database stays
unreachable the page repeats at most every `every` seconds; the first healthy pass resolves it.
A database that flaps (down, up, down, ...) within `every` of the last page pages again only
once it stays down for `confirm` passes in a row: one trigger and one resolve per spell, not
one per pass.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from cronwarden.config import redact_dsn
from cronwarden.logs import get_logger

log = get_logger("cronwarden.monitor")

CONFIRM_PASSES = 3


@dataclass(frozen=True)
class AlertState:
    open: bool = False
    """A trigger went out and no resolve since."""
    last_trigger_at: float | None = None
    """Clock reading (`now`) of the last trigger sent."""
    failures: int = 0
    """Failed passes in a row."""


def clock() -> float:
    """The clock `on_failure`'s `now` is read from."""
    return time.monotonic()


def boot_id() -> str | None:
    """This boot of this machine (Linux's random boot id): a monotonic reading means something
    only beside others of the same boot, and the state file can outlive both (a reboot, or a
    volume that follows the monitor's pod to another node)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def on_failure(
    state: AlertState, *, now: float, every: float, confirm: int = CONFIRM_PASSES
) -> tuple[AlertState, bool]:
    """The state after a failed pass, and whether to send a trigger now."""
    state = replace(state, failures=state.failures + 1)
    # A negative age is a clock that went back, not a page sent a moment ago: silence for as
    # long as the clock jumped would be the one failure an alert must not have.
    recent = state.last_trigger_at is not None and 0 <= now - state.last_trigger_at < every
    # An open alert repeats every `every`. A fresh outage pages at once; one within `every` of
    # the last page (flapping) only once it holds for `confirm` passes.
    send = not recent or (not state.open and state.failures >= confirm)
    if send:
        state = replace(state, open=True, last_trigger_at=now)
    return state, send


def on_healthy(state: AlertState) -> tuple[AlertState, bool]:
    """The state after a pass that reached the database, and whether to send the resolve."""
    return replace(state, open=False, failures=0), state.open


def default_state_file(dsn: str) -> Path:
    """One file per database (not per process): every monitor of this host and database
    shares it. The name is a digest of the DSN with its password masked: an unsalted digest of
    the password, in a directory anyone can list, could be checked against guesses offline
    (and a rotated password still names the same database)."""
    digest = hashlib.sha256(redact_dsn(dsn).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"cronwarden-monitor-{digest}.json"


class AlertStore:
    """The state, in memory and (when it can be written) in `path`."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.state = self._load()

    def _load(self) -> AlertState:
        if self.path is None:
            return AlertState()
        try:
            data = json.loads(self.path.read_text())
            last = data["last_trigger_at"]
            # Another boot's (or another node's) clock reading: its age here is unknown. The
            # alert stays open (its resolve is still owed); the next failure pages at once.
            if data.get("boot") != boot_id():
                last = None
            return AlertState(
                open=bool(data["open"]),
                last_trigger_at=float(last) if last is not None else None,
                failures=int(data["failures"]),
            )
        except FileNotFoundError:
            return AlertState()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning(
                "monitor.alert-state-unreadable", path=str(self.path), error=type(exc).__name__
            )
            return AlertState()

    def save(self, state: AlertState) -> None:
        if state == self.state:
            return
        self.state = state
        if self.path is None:
            return
        # Written whole and renamed into place: a monitor killed mid-write leaves the old state.
        # The temporary file is created new (O_EXCL) under an unguessable name: in a shared
        # temp directory a predictable one could be a link planted by another user, and the
        # write would go wherever it points.
        try:
            fd, name = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
            tmp = Path(name)
            try:
                with os.fdopen(fd, "w") as out:
                    out.write(json.dumps(asdict(state) | {"boot": boot_id()}))
                tmp.replace(self.path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
        except OSError as exc:
            log.warning(
                "monitor.alert-state-unwritable", path=str(self.path), error=type(exc).__name__
            )
