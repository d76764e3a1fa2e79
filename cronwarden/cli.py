"""The `cronwarden` command. Exit codes: 0 ok, 1 operation failed, 2 invalid input or usage.

Every expected failure is a `CronwardenError` rendered as one sentence on stderr; a traceback
means a bug.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from cronwarden.config import Settings
from cronwarden.errors import CronwardenError, InvalidInput
from cronwarden.logs import configure as configure_logging

T = TypeVar("T")

app = typer.Typer(
    name="cronwarden",
    help="Scheduled jobs on Temporal Schedules: never applied twice, never silently lost.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
schedules_app = typer.Typer(help="Register and inspect schedules.", no_args_is_help=True)
app.add_typer(schedules_app, name="schedules")

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def _settings() -> Settings:
    try:
        return Settings()
    except Exception as exc:  # pydantic's ValidationError: a bad CRONWARDEN_* value
        raise InvalidInput(f"invalid configuration: {exc}") from exc


def _fail(message: str, code: int) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", markup=True)
    return typer.Exit(code)


def _run(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    from asyncpg import InterfaceError, PostgresError, UndefinedTableError
    from temporalio.service import RPCError

    try:
        return asyncio.run(make())
    except CronwardenError as exc:
        raise _fail(str(exc), exc.exit_code) from None
    # A server that was reachable and then refused or broke off mid-operation: still one
    # sentence, still exit 1, never a traceback.
    except RPCError as exc:
        raise _fail(f"Temporal refused the request ({exc.status.name}): {exc.message}", 1) from None
    except UndefinedTableError as exc:
        raise _fail(f"{exc}: the database is not migrated; run `cronwarden migrate`", 1) from None
    except (PostgresError, InterfaceError) as exc:
        raise _fail(f"Postgres failed the request: {exc}", 1) from None
    except ConnectionError as exc:
        raise _fail(f"lost a connection: {exc}", 1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@app.callback()
def _root(
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING or ERROR.")] = "INFO",
    log_json: Annotated[
        bool | None, typer.Option("--log-json/--log-console", help="Default: JSON off a TTY.")
    ] = None,
) -> None:
    level = log_level.upper()
    if level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        raise typer.BadParameter(f"'{log_level}' is not a log level", param_hint="--log-level")
    configure_logging(level=level, json=log_json)


@app.command()
def migrate() -> None:
    """Apply pending database migrations (safe to run from several replicas at once)."""

    async def go() -> None:
        from store.migrate import migrate as run_migrations
        from store.pool import connect

        settings = _settings()
        conn = await connect(settings.dsn)
        try:
            applied = await run_migrations(conn)
        finally:
            await conn.close()
        if applied:
            for m in applied:
                out.print(f"applied {m.version:04d}_{m.name}")
        else:
            out.print("database is up to date")

    _run(go)


@app.command()
def worker() -> None:
    """Run a worker until SIGINT/SIGTERM, then drain in-flight runs and exit 0."""

    async def go() -> None:
        from cronwarden.worker_runtime import run_worker

        await run_worker(_settings())

    _run(go)


@schedules_app.command("apply")
def schedules_apply(
    file: Annotated[Path, typer.Argument(help="Schedule file (YAML).")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show changes, write nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Create or update every schedule of FILE. A file with any bad entry applies nothing."""

    async def go() -> None:
        from activities.jobs import import_job_modules
        from cronwarden import temporal
        from schedules.apply import apply_definitions
        from schedules.model import load_schedule_file
        from store.pool import create_pool

        settings = _settings()
        if not settings.job_modules():
            raise InvalidInput(
                "CRONWARDEN_JOBS is not set: apply needs the job modules to check each "
                "schedule's job and args"
            )
        registry = import_job_modules(settings.job_modules())
        definitions = load_schedule_file(file, registry)
        client = await temporal.connect(settings)
        pool = None if dry_run else await create_pool(settings.dsn, max_size=2)
        try:
            changes = await apply_definitions(
                client, pool, definitions, task_queue=settings.task_queue, dry_run=dry_run
            )
        finally:
            if pool is not None:
                await pool.close()
        if as_json:
            out.print_json(
                json.dumps(
                    {
                        "dry_run": dry_run,
                        "changes": [
                            {
                                "schedule_id": c.schedule_id,
                                "action": c.action,
                                "changed_fields": c.changed_fields,
                                "next_fire": c.next_fire.isoformat() if c.next_fire else None,
                            }
                            for c in changes
                        ],
                    }
                )
            )
            return
        prefix = "would be " if dry_run else ""
        for c in changes:
            detail = f" ({', '.join(c.changed_fields)})" if c.changed_fields else ""
            nxt = f", next fire {c.next_fire:%Y-%m-%dT%H:%M:%SZ}" if c.next_fire else ""
            out.print(f"{c.schedule_id}: {prefix}{c.action}{detail}{nxt}")
        if all(c.action == "unchanged" for c in changes):
            out.print("nothing to change" if changes else "the file lists no schedules")

    _run(go)


@app.command()
def dev(
    state_dir: Annotated[
        Path, typer.Option(help="Where the stack keeps its data between runs.")
    ] = Path(".cronwarden"),
    temporal_port: Annotated[int, typer.Option(help="Temporal frontend (gRPC) port.")] = 7233,
    ui_port: Annotated[int, typer.Option(help="Temporal Web UI port.")] = 8233,
    postgres_port: Annotated[int, typer.Option(help="Postgres port.")] = 55432,
    schedules_file: Annotated[
        Path, typer.Option("--schedules", help="Schedule file applied at start.")
    ] = Path("examples/schedules.yaml"),
    jobs: Annotated[str, typer.Option(help="Job modules to load.")] = "examples.ledger",
) -> None:
    """Run everything on this machine: Temporal dev server, Postgres, a worker and the demo."""
    from cronwarden.dev import DevOptions, run_dev

    for name, port in (
        ("--temporal-port", temporal_port),
        ("--ui-port", ui_port),
        ("--postgres-port", postgres_port),
    ):
        if not 1 <= port <= 65535:
            raise typer.BadParameter(f"{port} is not a TCP port", param_hint=name)
    options = DevOptions(
        state_dir=state_dir.resolve(),
        temporal_port=temporal_port,
        ui_port=ui_port,
        postgres_port=postgres_port,
        schedules_file=schedules_file,
        jobs=jobs,
    )
    _run(lambda: run_dev(options, console=out))


def main(argv: list[str] | None = None) -> None:
    app(args=argv)
