"""The `cronwarden` command: the root app and the commands that run processes.

Each command group has a module here (`schedules`, `backfill`, `monitor`); `support` holds the
error boundary every command goes through.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

from cronwarden.cli.backfill import audit_command, backfill_app
from cronwarden.cli.changes import FIRES, audit_app
from cronwarden.cli.monitor import monitor_command
from cronwarden.cli.schedules import schedules_app, status_command
from cronwarden.cli.support import duration_flag, load_settings, out, run_command
from cronwarden.config import DEV_STATE_DIR
from cronwarden.errors import CronwardenError
from cronwarden.logs import configure as configure_logging
from cronwarden.memory import limit_malloc_arenas

app = typer.Typer(
    name="cronwarden",
    help="Scheduled jobs on Temporal Schedules: never applied twice, never silently lost.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(schedules_app, name="schedules")
app.command("status")(status_command)
app.command("monitor")(monitor_command)
app.add_typer(backfill_app, name="backfill")
# `audit ID` still audits a schedule's fires: `audit` falls back to `audit fires` (cli/changes.py).
audit_app.command(FIRES)(audit_command)
app.add_typer(audit_app, name="audit")


# Processes that run on their own (a service, a Job): their INFO events are the record of what
# they did. The other commands print their result; their events stay at --log-level info.
_LOGGING_BY_DEFAULT = {"worker", "monitor", "dev", "migrate"}


@app.callback()
def _root(
    ctx: typer.Context,
    log_level: Annotated[
        str | None,
        typer.Option(
            help="DEBUG, INFO, WARNING or ERROR. Default: INFO for worker, monitor, dev and "
            "migrate; WARNING for the commands that print their result.",
            show_default=False,
        ),
    ] = None,
    log_json: Annotated[
        bool | None, typer.Option("--log-json/--log-console", help="Default: JSON off a TTY.")
    ] = None,
) -> None:
    if log_level is None:
        log_level = "INFO" if ctx.invoked_subcommand in _LOGGING_BY_DEFAULT else "WARNING"
    level = log_level.upper()
    if level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        raise typer.BadParameter(f"'{log_level}' is not a log level", param_hint="--log-level")
    configure_logging(level=level, json=log_json)


@app.command()
def migrate(
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Apply nothing: exit 0 if the database is up to date, 1 if migrations are "
            "pending. Read-only, so the runtime role may run it.",
        ),
    ] = False,
    wait: Annotated[
        float,
        typer.Option(
            parser=duration_flag(),
            metavar="DURATION",
            show_default=False,
            help="With --check: wait up to this long for them to land, 0s unless given (30s, "
            "5m; a bare number is seconds).",
        ),
    ] = 0.0,
) -> None:
    """Apply pending database migrations (safe to run from several replicas at once)."""
    if wait and not check:
        raise typer.BadParameter("--wait only applies with --check", param_hint="--wait")

    async def go() -> None:
        from cronwarden.store.migrate import CHECK_APPLICATION_NAME, wait_until_migrated
        from cronwarden.store.migrate import migrate as run_migrations
        from cronwarden.store.pool import connect

        settings = load_settings()
        # A waiting check is visible in pg_stat_activity under its own name.
        name = CHECK_APPLICATION_NAME if check else "cronwarden"
        conn = await connect(settings.dsn, application_name=name)
        try:
            if check:
                pending = await wait_until_migrated(conn, timeout=wait)
                if pending:
                    names = ", ".join(f"{m.version:04d}_{m.name}" for m in pending)
                    raise CronwardenError(
                        f"{len(pending)} migration(s) pending ({names}); "
                        "run `cronwarden migrate` as the migrator role"
                    )
                applied = []
            else:
                applied = await run_migrations(conn)
        finally:
            await conn.close()
        if applied:
            for m in applied:
                out.print(f"applied {m.version:04d}_{m.name}")
        else:
            out.print("database is up to date")

    run_command(go)


@app.command()
def worker(
    health_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="Serve /healthz and /readyz on this port (default: CRONWARDEN_HEALTH_PORT).",
        ),
    ] = None,
) -> None:
    """Run a worker until SIGINT/SIGTERM, then drain in-flight runs and exit 0."""

    async def go() -> None:
        from cronwarden.worker_runtime import run_worker

        settings = load_settings()
        if health_port is not None:
            settings = settings.model_copy(update={"health_port": health_port})
        await run_worker(settings)

    run_command(go)


@app.command()
def dev(
    state_dir: Annotated[
        Path, typer.Option(help="Where the stack keeps its data between runs.")
    ] = DEV_STATE_DIR,
    temporal_port: Annotated[int, typer.Option(help="Temporal frontend (gRPC) port.")] = 7233,
    ui_port: Annotated[int, typer.Option(help="Temporal Web UI port.")] = 8233,
    postgres_port: Annotated[int, typer.Option(help="Postgres port.")] = 55432,
    status_port: Annotated[
        int, typer.Option(help="The status page (and the monitor's /metrics), on 127.0.0.1.")
    ] = 8234,
    schedules_file: Annotated[
        Path, typer.Option("--schedules", help="Schedule file applied at start.")
    ] = Path("examples/schedules.yaml"),
    jobs: Annotated[str, typer.Option(help="Job modules to load.")] = "cronwarden.examples.ledger",
) -> None:
    """Run everything on this machine: Temporal dev server, Postgres, a worker and the demo."""
    from cronwarden.dev import DevOptions, run_dev

    for name, port in (
        ("--temporal-port", temporal_port),
        ("--ui-port", ui_port),
        ("--postgres-port", postgres_port),
        ("--status-port", status_port),
    ):
        if not 1 <= port <= 65535:
            raise typer.BadParameter(f"{port} is not a TCP port", param_hint=name)
    options = DevOptions(
        state_dir=state_dir.resolve(),
        temporal_port=temporal_port,
        ui_port=ui_port,
        postgres_port=postgres_port,
        status_port=status_port,
        schedules_file=schedules_file,
        jobs=jobs,
    )
    run_command(lambda: run_dev(options, console=lambda text: out.print(text, markup=True)))


def _hide_flag_types(command: TyperCommand | TyperGroup) -> None:
    """Typer labels every option with its type, flags too: `--json <bool>` reads as if the flag
    took a value. A flag's metavar is what the help shows instead; an empty one shows nothing."""
    ctx = command.context_class(command)
    for param in command.get_params(ctx):  # with --help, which is created on demand
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _hide_flag_types(sub)


def command() -> TyperGroup:
    """The `cronwarden` command as it runs: typer's, with the help cleaned up."""
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    _hide_flag_types(root)
    return root


def main(argv: list[str] | None = None) -> None:
    # First, before the SDK's native threads or any command's threads allocate.
    limit_malloc_arenas()
    try:
        command()(args=argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    leave(code)


def leave(code: int) -> NoReturn:
    """End the process with `code`, without finalizing the interpreter."""
    # The Temporal SDK's Rust runtime keeps threads that can call into CPython while the
    # interpreter finalizes, which aborts the process (SIGABRT) after the command has succeeded
    # (temporalio/sdk-python#300): scripts would see a crash instead of our exit code. Every
    # command has finished its work and closed its servers' connections here, so flush and leave
    # without finalizing.
    for stream in (sys.stdout, sys.stderr):
        # A reader that went away, or a closed stream, must not change the exit code.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
