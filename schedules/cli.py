"""`cronwarden schedules …`: register and inspect schedules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from cronwarden.cli_support import load_settings, out, run_command
from cronwarden.errors import InvalidInput

schedules_app = typer.Typer(help="Register and inspect schedules.", no_args_is_help=True)


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

        settings = load_settings()
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

    run_command(go)
