"""Child processes shared by both embedded servers: spawn, wait until ready, stop, log tails,
pid checks, and the account to run as."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cronwarden.errors import CronwardenError, PortInUse

_LOG_TAIL_LINES = 20
_POLL_INTERVAL = 0.1
# After the polite signal has had its timeout, how long the harsher ones get before we give up.
ESCALATION_WAIT = 5.0


# --- processes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunAs:
    """An unprivileged account to run a server as, because we are root."""

    uid: int
    gid: int


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, belongs to another user
    # A zombie has exited and released its ports and files; only its parent's wait() is missing,
    # and that parent may be a crashed cronwarden that will never call it.
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat_line.rpartition(")")[2].split()[0] != "Z"


def cmdline(pid: int) -> list[str]:
    """The argv of a running process, or [] if it is gone or unreadable."""
    proc = Path(f"/proc/{pid}/cmdline")
    if Path("/proc/self").exists():
        try:
            return [arg.decode(errors="replace") for arg in proc.read_bytes().split(b"\0") if arg]
        except OSError:
            return []
    # No procfs (macOS): ps splits on spaces, good enough to recognise our own command lines.
    result = subprocess.run(
        ["ps", "-ww", "-o", "command=", "-p", str(pid)],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.split()


def child_env(drop_prefix: str) -> dict[str, str]:
    # PGPORT, PGOPTIONS, TEMPORAL_ADDRESS, TEMPORAL_TLS... from the user's shell would silently
    # point our children (or our probes of them) somewhere else; every setting they need is a flag.
    return {k: v for k, v in os.environ.items() if not k.startswith(drop_prefix)}


def log_tail(log_file: Path, offset: int) -> str:
    """The last lines this run wrote to `log_file` (earlier runs' lines would mislead)."""
    try:
        with log_file.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError as exc:
        return f"(log {log_file} unreadable: {exc.strerror})"
    lines = text.splitlines()[-_LOG_TAIL_LINES:]
    return "\n".join(lines) if lines else "(log is empty)"


@contextlib.contextmanager
def file_errors(what: str) -> Iterator[None]:
    """Turn a filesystem failure while preparing `what` into a sentence instead of a traceback."""
    try:
        yield
    except OSError as exc:
        raise CronwardenError(f"cannot prepare {what}: {exc}") from exc


def open_log(log_file: Path, header: str) -> tuple[int, int]:
    """Open `log_file` for appending; return its fd and the offset where this run's lines begin."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    offset = os.lseek(fd, 0, os.SEEK_END)
    os.write(fd, f"=== cronwarden: {header} at {datetime.now(UTC).isoformat()} ===\n".encode())
    return fd, offset


def spawn(
    argv: Sequence[str], *, log_fd: int, env: dict[str, str], run_as: RunAs | None
) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            env=env,
            # Own process group: a Ctrl-C in the terminal reaches only us, so the servers are still
            # up while we shut our workers down, and we stop them afterwards, in order.
            process_group=0,
            user=run_as.uid if run_as else None,
            group=run_as.gid if run_as else None,
            # Without this the child would keep root's supplementary groups.
            extra_groups=[] if run_as else None,
            # The account we switch to may not be allowed into our working directory.
            cwd="/",
        )
    except OSError as exc:
        raise CronwardenError(f"cannot run {argv[0]}: {exc}") from exc


def wait_gone(is_gone: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not is_gone():
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_INTERVAL)
    return True


def stop_child(
    proc: subprocess.Popen[bytes], *, signals: Sequence[signal.Signals], timeout: float
) -> None:
    """Send `signals[0]` and wait `timeout`; then each harsher signal briefly; SIGKILL last."""
    waits = [timeout] + [ESCALATION_WAIT] * (len(signals) - 1)
    for sig, wait in zip(signals, waits, strict=True):
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait)
    if proc.poll() is None:
        # Only the leader: Postgres puts each backend in its own session, out of reach of a group
        # kill, and backends exit by themselves once they notice the postmaster is gone.
        proc.kill()
        proc.wait()


def wait_ready(
    *,
    what: str,
    proc: subprocess.Popen[bytes],
    ready: Callable[[float], bool],
    deadline: float,
    timeout: float,
    log_file: Path,
    log_offset: int,
) -> None:
    """Poll `ready(seconds_left)` until it is true; raise with the log tail if the child dies or
    the deadline passes."""
    while True:
        code = proc.poll()
        if code is not None:
            tail = log_tail(log_file, log_offset)
            if "already in use" in tail.lower():
                raise PortInUse(
                    f"{what} exited because one of its ports was taken after we checked it; "
                    f"start again or choose other ports. Last lines of {log_file}:\n{tail}"
                )
            raise CronwardenError(
                f"{what} exited with code {code} while starting. Last lines of {log_file}:\n{tail}"
            )
        left = deadline - time.monotonic()
        if left <= 0:
            raise CronwardenError(
                f"{what} did not become ready within {timeout:g}s. "
                f"Last lines of {log_file}:\n{log_tail(log_file, log_offset)}"
            )
        if ready(left):
            return
        time.sleep(min(_POLL_INTERVAL, left))
