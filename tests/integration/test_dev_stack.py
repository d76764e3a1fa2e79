"""The README's first command: `cronwarden dev` brings the whole stack up from wheels, runs the
demo, stops on Ctrl-C, and resumes with the same state when run again."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from cronwarden.embedded import free_port
from cronwarden.embedded.processes import cmdline
from tests.support.cli import cronwarden_argv
from tests.support.http_probe import http_get_text
from tests.support.paths import REPO_ROOT
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def ports() -> dict[str, int]:
    return {
        "temporal": free_port(),
        "ui": free_port(),
        "postgres": free_port(),
        "status": free_port(),
    }


def dev_argv(state: Path, ports: dict[str, int]) -> list[str]:
    return cronwarden_argv(
        "--log-json",
        "dev",
        "--state-dir",
        str(state),
        "--temporal-port",
        str(ports["temporal"]),
        "--ui-port",
        str(ports["ui"]),
        "--postgres-port",
        str(ports["postgres"]),
        "--status-port",
        str(ports["status"]),
    )


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def start_dev(state: Path, ports: dict[str, int], out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        dev_argv(state, ports),
        cwd=REPO_ROOT,
        stdout=out.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
    )


async def ledger_keys(dsn: str) -> set[str]:
    try:
        conn = await asyncpg.connect(dsn)
    except (OSError, asyncpg.PostgresError):
        return set()
    try:
        if not await conn.fetchval("SELECT to_regclass('public.demo_ledger') IS NOT NULL"):
            return set()
        rows = await conn.fetch("SELECT logical_key FROM public.demo_ledger")
        committed = await conn.fetch("SELECT logical_key FROM cronwarden.outbox")
    finally:
        await conn.close()
    ledger = {r["logical_key"] for r in rows}
    # Every ledger posting belongs to a committed outbox record (same transaction).
    assert ledger <= {r["logical_key"] for r in committed}
    return ledger


async def monitor_passes(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(
            await conn.fetchval("SELECT coalesce(sum(passes), 0) FROM cronwarden.monitor_state")
        )
    finally:
        await conn.close()


async def stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGINT)
    return await asyncio.to_thread(proc.wait, 60)


async def test_dev_runs_the_demo_stops_on_ctrl_c_and_resumes_with_its_state(
    tmp_path: Path, ports: dict[str, int], processes: list[subprocess.Popen[str]]
) -> None:
    state = tmp_path / "state"
    first_log = tmp_path / "first.log"
    proc = start_dev(state, ports, first_log)
    processes.append(proc)
    env_file = state / "env"
    await wait_for(lambda: _exists(env_file), timeout=60, what="the env file")
    env = dict(
        line.split("=", 1)
        for line in env_file.read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    assert env["CRONWARDEN_TEMPORAL_ADDRESS"] == f"127.0.0.1:{ports['temporal']}"
    dsn = env["CRONWARDEN_DATABASE_URL"]
    before = await wait_for(lambda: ledger_keys(dsn), timeout=60, what="a demo posting")
    # The monitor runs beside the worker and records its passes in the same database.
    await wait_for(lambda: monitor_passes(dsn), timeout=30, what="a monitor pass")
    assert f"http://127.0.0.1:{ports['ui']}" in first_log.read_text()
    # The status page the banner points at shows the demo's schedules with their timelines.
    assert f"Status page   http://127.0.0.1:{ports['status']}/" in first_log.read_text()

    async def demo_timeline() -> str | None:
        status, html = await http_get_text(ports["status"], "/")
        return html if status == 200 and 'data-state="committed"' in html else None

    page = await wait_for(demo_timeline, timeout=60, what="a committed slot on the status page")
    assert page is not None and 'data-schedule="demo-interest"' in page
    # The banner's hint works exactly as printed, in a fresh shell elsewhere whose PATH does
    # not hold the virtualenv.
    hint = next(li for li in first_log.read_text().splitlines() if "second shell" in li)
    second = await asyncio.to_thread(
        subprocess.run,
        ["bash", "-c", hint.split("second shell", 1)[1].strip()],
        cwd=tmp_path,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert second.returncode == 0, second
    assert "demo-interest" in second.stdout, second
    assert await stop(proc) == 0, first_log.read_text()
    assert not _listening(ports["postgres"]) and not _listening(ports["temporal"])

    second_log = tmp_path / "second.log"
    proc = start_dev(state, ports, second_log)
    processes.append(proc)
    await wait_for(
        lambda: _contains(second_log, "demo-interest (unchanged)"),
        timeout=60,
        what="the second start to find its schedules",
    )
    # The ledger of the first run is still there (same Postgres data), and it keeps growing.
    await wait_for(lambda: _grew(dsn, before), timeout=60, what="a posting after the restart")
    assert await stop(proc) == 0, second_log.read_text()


async def test_dev_refuses_a_port_in_use_and_leaves_nothing_running(
    tmp_path: Path, ports: dict[str, int]
) -> None:
    with socket.socket() as taken:
        # free_port() leaves the port in TIME_WAIT; a listener may still take it.
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", ports["temporal"]))
        taken.listen(1)
        started = time.monotonic()
        result = await asyncio.to_thread(
            subprocess.run,
            dev_argv(tmp_path / "state", ports),
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 1, result.stdout + result.stderr
    assert time.monotonic() - started < 60
    assert f"port {ports['temporal']}" in result.stderr
    assert "--temporal-port" in result.stderr
    assert "Traceback" not in result.stderr
    # Postgres had started before Temporal was refused: it must have been stopped again.
    assert not _listening(ports["postgres"])


# Reads the dev process's output until the banner, then goes away: `make dev | tee dev.log` whose
# tee was killed by the same Ctrl-C, or a terminal that closed.
_READ_UNTIL_UP = (
    "import sys\n"
    "for line in sys.stdin:\n"
    "    if 'cronwarden dev is up' in line:\n"
    "        sys.exit(0)\n"
    "sys.exit(1)\n"
)


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name
)
async def test_dev_stops_every_process_it_started_on_a_signal_after_its_output_reader_died(
    tmp_path: Path, ports: dict[str, int], sig: signal.Signals
) -> None:
    state = tmp_path / "state"
    reader, proc = _start_dev_behind_a_pipe(state, ports)
    started: dict[int, str] = {}
    try:
        await wait_for(lambda: _exited(reader), timeout=120, what="the banner to reach the reader")
        assert reader.returncode == 0, "the reader never saw the banner"
        started = _descendants(proc.pid)
        temporal_pid = int((state / "temporal.pid").read_text())
        postgres_pid = int((state / "postgres" / "postmaster.pid").read_text().split()[0])
        assert {temporal_pid, postgres_pid} <= started.keys()
        # The stack keeps running with nobody reading its output (its log lines fail to write).
        dsn = f"postgresql://postgres@127.0.0.1:{ports['postgres']}/cronwarden"
        passes = await monitor_passes(dsn)
        await wait_for(
            lambda: _more_passes(dsn, passes),
            timeout=60,
            what="a monitor pass after the reader died",
        )
        assert proc.poll() is None
        proc.send_signal(sig)
        await wait_for(
            lambda: _exited(proc), timeout=90, what=f"cronwarden dev to exit on {sig.name}"
        )
        with contextlib.suppress(AssertionError):
            await wait_for(
                lambda: _none_left(started), timeout=30, what="the processes dev started to exit"
            )
        assert not _survivors(started), "still running after cronwarden dev exited"
        assert proc.returncode == 0
    finally:
        # A failing run must not leave servers behind on the machine.
        if proc.poll() is None:
            proc.kill()
        for pid in _survivors(started):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
        if reader.poll() is None:
            reader.kill()
            reader.wait()


def _start_dev_behind_a_pipe(
    state: Path, ports: dict[str, int]
) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    read_end, write_end = os.pipe()
    reader = subprocess.Popen([sys.executable, "-c", _READ_UNTIL_UP], stdin=read_end)
    proc = subprocess.Popen(
        dev_argv(state, ports), cwd=REPO_ROOT, stdout=write_end, stderr=write_end
    )
    # Only the two processes hold the pipe now: once the reader exits, every write fails.
    os.close(read_end)
    os.close(write_end)
    return reader, proc


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (state first), None once it is gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None


def _descendants(root: int) -> dict[int, str]:
    """Every process below `root`, with its start time: a pid reused by an unrelated process
    after ours exited is then never mistaken for ours (nor killed by the cleanup)."""
    fields = {int(e.name): _stat(int(e.name)) for e in Path("/proc").iterdir() if e.name.isdigit()}
    found: dict[int, str] = {}
    frontier = {root}
    while frontier:
        frontier = {
            pid for pid, f in fields.items() if f and int(f[1]) in frontier and pid not in found
        }
        found |= {pid: f[19] for pid in frontier if (f := fields[pid])}
    return found


def _survivors(started: dict[int, str]) -> dict[int, str]:
    alive = {}
    for pid, start_time in started.items():
        fields = _stat(pid)
        # A zombie has exited; only its parent's wait() is missing.
        if fields is not None and fields[19] == start_time and fields[0] != "Z":
            alive[pid] = " ".join(cmdline(pid))
    return alive


async def _none_left(started: dict[int, str]) -> bool:
    return not _survivors(started)


async def _exited(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is not None


async def _more_passes(dsn: str, before: int) -> bool:
    return await monitor_passes(dsn) > before


async def _exists(path: Path) -> bool:
    return path.exists()


async def _contains(path: Path, text: str) -> bool:
    return path.exists() and text in path.read_text()


async def _grew(dsn: str, before: set[str]) -> bool:
    return bool(await ledger_keys(dsn) - before)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0
