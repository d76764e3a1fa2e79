"""`cronwarden dev`: the whole stack on this machine, from wheels, with state kept between runs.

Order matters on the way up (Postgres and Temporal before the worker, migrations before the
schedules) and on the way down (the worker drains while both servers are still up, then
Temporal stops, then Postgres).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import shlex
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TypeAlias

from cronwarden import temporal
from cronwarden.activities.jobs import import_job_modules
from cronwarden.config import DEV_ENV_FILE, Settings
from cronwarden.embedded import EmbeddedPostgres, EmbeddedTemporal, ensure_port_free
from cronwarden.errors import InvalidInput
from cronwarden.logs import get_logger
from cronwarden.monitor.process import run_monitor
from cronwarden.schedules.apply import apply_definitions
from cronwarden.schedules.model import load_schedule_file
from cronwarden.store.migrate import migrate
from cronwarden.store.pool import connect, create_pool
from cronwarden.worker_runtime import pool_size, run_worker

DATABASE = "cronwarden"
# A job module may carry the DDL of its own demo tables; `dev` runs it after the migrations.
DEV_SETUP_SQL = "DEV_SETUP_SQL"
# Seconds between two monitor passes: quick enough to see a page while trying things out.
DEV_MONITOR_INTERVAL = 5.0
# Ctrl-C, a service manager's stop, and the terminal closing.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

log = get_logger(__name__)


@dataclass(frozen=True)
class DevOptions:
    state_dir: Path
    temporal_port: int
    ui_port: int
    postgres_port: int
    status_port: int
    """The monitor's HTTP port: the status page at `/`, its /metrics, on 127.0.0.1 only."""
    schedules_file: Path
    jobs: str


def _schedules_path(path: Path) -> Path:
    if path.exists():
        return path
    if path == Path("examples/schedules.yaml"):
        # Run from outside a checkout: use the copy installed with the package.
        with resources.as_file(
            resources.files("cronwarden.examples") / "schedules.yaml"
        ) as packaged:
            return packaged
    raise InvalidInput(f"schedule file {path} does not exist")


def write_env_file(path: Path, settings: Settings) -> None:
    lines = [
        "# Written by `cronwarden dev`: point a second shell at the same stack with",
        f"#   set -a; . {path}; set +a",
        f"CRONWARDEN_TEMPORAL_ADDRESS={settings.temporal_address}",
        f"CRONWARDEN_NAMESPACE={settings.namespace}",
        f"CRONWARDEN_TASK_QUEUE={settings.task_queue}",
        f"CRONWARDEN_DATABASE_URL={settings.dsn}",
        f"CRONWARDEN_JOBS={settings.jobs}",
        "",
    ]
    path.write_text("\n".join(lines))


async def _run_setup_sql(settings: Settings) -> None:
    conn = await connect(settings.dsn)
    try:
        await migrate(conn)
        for module_name in settings.job_modules():
            sql = getattr(importlib.import_module(module_name), DEV_SETUP_SQL, None)
            if isinstance(sql, str):
                await conn.execute(sql)
    finally:
        await conn.close()


def cli_command() -> str:
    """How another shell runs this same cronwarden, as typed: the bare name only when PATH
    finds this very script (`make dev` runs the venv's, which is usually not on PATH)."""
    script = Path(sys.executable).parent / "cronwarden"
    if not script.is_file():
        return f"{shlex.quote(sys.executable)} -m cronwarden"
    found = shutil.which("cronwarden")
    if found is not None and Path(found).resolve() == script.resolve():
        return "cronwarden"
    return shlex.quote(str(script))


class _StopSignals:
    """What Ctrl-C, SIGTERM and SIGHUP (the terminal closing) do, whatever phase `dev` is in.

    Every one of them means "stop everything, in order", and none may cut that stop short: a
    second signal, or the default action of SIGTERM/SIGHUP (instant death), would leave Temporal
    and Postgres running in their own process groups. So the three are routed through the event
    loop for the whole run, and never interrupt synchronous code: while starting they cancel the
    start (a server being started finishes its start, then the finally blocks stop it); once
    the worker runs they set its stop event; while stopping they are only noted.
    """

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.stop = asyncio.Event()
        self.received: signal.Signals | None = None
        self._worker_running = False

    def install(self) -> None:
        for sig in STOP_SIGNALS:
            self.loop.add_signal_handler(sig, self._on_signal, sig)

    def uninstall(self) -> None:
        for sig in STOP_SIGNALS:
            self.loop.remove_signal_handler(sig)

    @contextlib.contextmanager
    def worker_running(self) -> Iterator[None]:
        self._worker_running = True
        try:
            yield
        finally:
            self._worker_running = False
            # run_worker's own handlers for SIGINT/SIGTERM are gone now, and it restored the
            # defaults: take the signals back before anything else can arrive.
            self.install()

    def _on_signal(self, sig: signal.Signals) -> None:
        if self.received is not None:
            log.info("dev.still-stopping", signal=sig.name)
            return
        self.received = sig
        log.info("dev.stopping", signal=sig.name)
        if self._worker_running:
            self.stop.set()
        elif self.task is not None:
            self.task.cancel()


Say: TypeAlias = Callable[[str], None]
"""Prints one line of the banner or progress (rich markup allowed): the CLI's console."""


def _say(console: Say, text: str) -> None:
    # `make dev | tee dev.log`: Ctrl-C kills tee too, and a print to its pipe raises
    # BrokenPipeError; in a finally block that would skip the stops that follow it.
    with contextlib.suppress(OSError, ValueError):
        console(text)


async def run_dev(options: DevOptions, *, console: Say) -> None:
    signals = _StopSignals()
    signals.install()
    try:
        await _run_stack(options, console=console, signals=signals)
    except asyncio.CancelledError:
        if signals.received is None:
            raise
        # Stopped while starting: everything that had started is stopped again.
        raise KeyboardInterrupt from None
    finally:
        signals.uninstall()


async def _run_stack(options: DevOptions, *, console: Say, signals: _StopSignals) -> None:
    state = options.state_dir
    state.mkdir(parents=True, exist_ok=True)
    schedules_file = _schedules_path(options.schedules_file)
    # Checked before anything starts: the monitor binds it only once the stack is up.
    ensure_port_free(options.status_port, what="the status page", flag="--status-port")
    settings = Settings(
        temporal_address=f"127.0.0.1:{options.temporal_port}",
        temporal_ui_url=f"http://127.0.0.1:{options.ui_port}",
        database_url=f"postgresql://postgres@127.0.0.1:{options.postgres_port}/{DATABASE}",  # type: ignore[arg-type]
        jobs=options.jobs,
        graceful_shutdown_seconds=10,
    )
    registry = import_job_modules(settings.job_modules())
    # Refuse a bad schedule file before starting anything.
    definitions = load_schedule_file(schedules_file, registry)

    postgres = EmbeddedPostgres(
        data_dir=state / "postgres", port=options.postgres_port, log_file=state / "postgres.log"
    )
    server = EmbeddedTemporal(
        port=options.temporal_port,
        ui_port=options.ui_port,
        db_file=state / "temporal.db",
        log_file=state / "temporal.log",
    )
    # The servers start synchronously, on purpose: a stop signal during a start lets that start
    # finish (or fail and clean up after itself), and the finally blocks below then see every
    # server that did start. A start in a worker thread would outlive the cancellation.
    try:
        _say(console, f"starting Postgres on 127.0.0.1:{options.postgres_port} …")
        postgres.start()
        postgres.create_database(DATABASE)
        try:
            _say(console, f"starting Temporal on {server.address} …")
            server.start()
            await _run_setup_sql(settings)
            client = await temporal.connect(settings)
            pool = await create_pool(settings.dsn, max_size=pool_size(settings.max_concurrent_runs))
            try:
                changes = await apply_definitions(
                    client, pool, definitions, task_queue=settings.task_queue
                )
                env_file = state / DEV_ENV_FILE.name
                write_env_file(env_file, settings)
                _say(
                    console,
                    f"\n[bold]cronwarden dev is up[/]\n"
                    f"  Temporal UI   {server.ui_url}\n"
                    f"  Status page   http://127.0.0.1:{options.status_port}/\n"
                    f"  Temporal      {server.address} (namespace {settings.namespace})\n"
                    f"  Postgres      {settings.dsn}\n"
                    f"  schedules     "
                    + ", ".join(f"{c.schedule_id} ({c.action})" for c in changes)
                    + f"\n  second shell  set -a; . {shlex.quote(str(env_file))}; set +a; "
                    f"{cli_command()} status\n"
                    "  Ctrl-C stops everything; run it again to resume with the same state.\n",
                )
                # The monitor runs beside the worker (with its own pool) and stops with it.
                watching = asyncio.create_task(
                    run_monitor(
                        settings,
                        interval=DEV_MONITOR_INTERVAL,
                        metrics_port=options.status_port,
                        metrics_host="127.0.0.1",
                        stop=signals.stop,
                        handle_signals=False,
                    ),
                    name="monitor",
                )
                try:
                    with signals.worker_running():
                        await run_worker(settings, client=client, pool=pool, stop=signals.stop)
                finally:
                    signals.stop.set()
                    await watching
            finally:
                await pool.close()
        finally:
            if server.running:
                _say(console, "stopping Temporal …")
            server.stop()
    finally:
        if postgres.running:
            _say(console, "stopping Postgres …")
        postgres.stop()
