"""`cronwarden schedules …` and `cronwarden status`: register, inspect and operate schedules.

Every listing has `--json`; its shape is documented in the README and never coloured.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import typer
from rich.markup import escape
from rich.table import Table

from cronwarden.cli.support import emit_json, load_settings, out, print_wide, run_command
from cronwarden.errors import InvalidInput
from cronwarden.times import utc_text

if TYPE_CHECKING:
    import asyncpg
    from temporalio.client import Client

    from cronwarden.schedules.apply import Change
    from cronwarden.schedules.inventory import ListedView, ScheduleView
    from cronwarden.schedules.status import StatusRow

schedules_app = typer.Typer(help="Register, inspect and operate schedules.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
IdArgument = Annotated[str, typer.Argument(help="Schedule id.", show_default=False)]

HEALTH_STYLE = {
    "ok": "green",
    "running": "green",
    "late": "yellow",
    "overdue": "bold red",
    "paused": "cyan",
}


def _iso(value: datetime | None) -> str | None:
    return utc_text(value) if value else None


@asynccontextmanager
async def _temporal() -> AsyncIterator[Client]:
    from cronwarden import temporal

    yield await temporal.connect(load_settings())


@asynccontextmanager
async def _temporal_and_db() -> AsyncIterator[tuple[Client, asyncpg.Pool]]:
    from cronwarden import temporal
    from cronwarden.store.pool import create_pool

    settings = load_settings()
    client = await temporal.connect(settings)
    pool = await create_pool(settings.dsn, max_size=2)
    try:
        yield client, pool
    finally:
        await pool.close()


@schedules_app.command("apply")
def schedules_apply(
    file: Annotated[Path, typer.Argument(help="Schedule file (YAML).")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show changes, write nothing.")
    ] = False,
    prune: Annotated[
        bool,
        typer.Option(
            "--prune",
            help="Delete the schedules cronwarden created (on this task queue) that FILE no "
            "longer lists. Never touches schedules it did not create.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Create, update (or with --prune delete) schedules to match FILE.

    A file with any bad entry applies nothing.
    """

    async def go() -> None:
        from cronwarden import temporal
        from cronwarden.activities.jobs import import_job_modules
        from cronwarden.schedules.apply import apply_definitions
        from cronwarden.schedules.model import load_schedule_file
        from cronwarden.store.pool import create_pool

        settings = load_settings()
        if not settings.job_modules():
            raise InvalidInput(
                "CRONWARDEN_JOBS is not set: apply needs the job modules to check each "
                "schedule's job and args"
            )
        registry = import_job_modules(settings.job_modules())
        definitions = load_schedule_file(file, registry)
        client = await temporal.connect(settings)
        # Each concurrent write records its rows in a transaction of its own: a few
        # connections keep them from queueing behind each other.
        pool = None if dry_run else await create_pool(settings.dsn, max_size=4)
        try:
            changes = await apply_definitions(
                client,
                pool,
                definitions,
                task_queue=settings.task_queue,
                dry_run=dry_run,
                prune=prune,
            )
        finally:
            if pool is not None:
                await pool.close()
        _print_changes(changes, dry_run=dry_run, as_json=as_json)

    run_command(go)


def _print_changes(changes: list[Change], *, dry_run: bool, as_json: bool) -> None:
    if as_json:
        emit_json(
            {
                "dry_run": dry_run,
                "changes": [
                    {
                        "schedule_id": c.schedule_id,
                        "action": c.action,
                        "changed_fields": c.changed_fields,
                        "next_fire": _iso(c.next_fire),
                        "next_fires": [_iso(t) for t in c.next_fires],
                    }
                    for c in changes
                ],
            }
        )
        return
    prefix = "would be " if dry_run else ""
    for c in changes:
        detail = f" ({', '.join(c.changed_fields)})" if c.changed_fields else ""
        nxt = f", next fire {_iso(c.next_fire)}" if c.next_fire else ""
        if c.next_fires:
            nxt = ", next fires " + ", ".join(utc_text(t) for t in c.next_fires)
        elif dry_run and c.action in ("created", "updated"):
            nxt = ", no fire ahead"
        out.print(escape(f"{c.schedule_id}: {prefix}{c.action}{detail}{nxt}"))
    if all(c.action == "unchanged" for c in changes):
        out.print("nothing to change" if changes else "the file lists no schedules")


def _view_json(v: ScheduleView | ListedView) -> dict[str, Any]:
    return {
        "schedule_id": v.schedule_id,
        "managed": v.managed,
        "job": v.job,
        "spec": v.spec,
        "overlap": v.overlap,
        "paused": v.paused,
        "note": v.note,
        "next_fire": _iso(v.next_fire_times[0]) if v.next_fire_times else None,
    }


@schedules_app.command("list")
def schedules_list(as_json: JsonOption = False) -> None:
    """Every schedule of the namespace; those cronwarden did not create are marked unmanaged."""

    async def go() -> None:
        from cronwarden.schedules.inventory import listed_views
        from cronwarden.store import definitions

        async with _temporal_and_db() as (client, pool):
            async with pool.acquire() as conn:
                recorded = await definitions.latest_all(conn)
            views = await listed_views(client, recorded)
        if as_json:
            emit_json({"schedules": [_view_json(v) for v in views]})
            return
        if not views:
            out.print("no schedules")
            return
        table = Table("id", "job", "spec", "overlap", "paused", "next fire (UTC)")
        for v in views:
            table.add_row(
                escape(v.schedule_id),
                escape(v.job or ("-" if v.managed else "(unmanaged)")),
                escape(v.spec),
                v.overlap or "-",
                escape(f"yes: {v.note}" if v.paused and v.note else "yes" if v.paused else "no"),
                _iso(v.next_fire_times[0]) if v.next_fire_times else "-",
            )
        print_wide(table)

    run_command(go)


async def _run_outcome(
    client: Client, workflow_id: str, run_id: str, *, managed: bool
) -> tuple[str, str | None]:
    """Temporal's status of a run and, for a completed run of a managed schedule, the guard's
    in-band outcome (`ran`, `already-done`, `overlap-locked`)."""
    from temporalio.service import RPCError, RPCStatusCode

    from cronwarden.activities.contract import RunOutcome

    handle = client.get_workflow_handle(workflow_id, run_id=run_id, result_type=RunOutcome)
    try:
        wf = await handle.describe()
        status = wf.status.name.lower() if wf.status else "unknown"
        if status != "completed" or not managed:
            # A foreign schedule's workflow returns whatever it likes: not ours to decode.
            return status, None
        try:
            result = await handle.result(follow_runs=False)
        except (TypeError, ValueError, KeyError, RuntimeError):
            # Not a RunOutcome (another shape) or a payload codec this process lacks: the
            # status is still worth showing.
            return status, None
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            # Past the namespace's retention: Temporal no longer knows it; the outbox may.
            return "expired", None
        raise
    return status, result.outcome


async def _describe_json(client: Client, pool: asyncpg.Pool, v: ScheduleView) -> dict[str, Any]:
    from cronwarden.activities.contract import logical_key
    from cronwarden.schedules.status import lease_skip_json
    from cronwarden.store import heartbeats, outbox

    keys = {r.workflow_id: logical_key(v.schedule_id, r.scheduled_at) for r in v.recent_runs}
    async with pool.acquire() as conn:
        committed = await outbox.committed_keys(conn, list(keys.values())) if v.managed else None
        beat = await heartbeats.get(conn, v.schedule_id)
    runs = []
    for r in sorted(v.recent_runs, key=lambda r: r.scheduled_at, reverse=True):
        status, outcome = await _run_outcome(client, r.workflow_id, r.run_id, managed=v.managed)
        runs.append(
            {
                "logical_key": keys[r.workflow_id],
                "scheduled_at": _iso(r.scheduled_at),
                "started_at": _iso(r.started_at),
                "workflow_id": r.workflow_id,
                "status": status,
                "outcome": outcome,
                "committed": None if committed is None else keys[r.workflow_id] in committed,
            }
        )
    return {
        **_view_json(v),
        "catchup_window": v.catchup_window,
        "pause_on_failure": v.pause_on_failure,
        "orphaned": v.orphaned,
        "next_fire_times": [_iso(t) for t in v.next_fire_times[:5]],
        "recent_runs": runs,
        "running": v.running,
        "skipped_overlap": v.skipped_overlap,
        "missed_catchup": v.missed_catchup,
        "heartbeat": None
        if beat is None
        else {
            "last_logical_key": beat["last_logical_key"],
            "last_success_at": _iso(beat["last_success_at"]),
            # Replays (`backfill run`) are recorded apart: they never move the live fields.
            "last_replay_key": beat.get("last_replay_key"),
            "last_replay_at": _iso(beat.get("last_replay_at")),
            "next_expected_at": _iso(beat["next_expected_at"]),
            "grace_seconds": int(beat["grace"].total_seconds()),
            "paused": beat["paused"],
            "paused_reason": beat["paused_reason"],
            "last_error": beat["last_error"],
            "skipped_lease": beat["lease_skips"],
            "last_lease_skip": lease_skip_json(beat),
        },
        "definition": v.definition,
    }


@schedules_app.command("describe")
def schedules_describe(schedule_id: IdArgument, as_json: JsonOption = False) -> None:
    """Spec, policies, pause, the next 5 fire times, recent runs and Temporal's counters."""

    async def go() -> None:
        from cronwarden.schedules.inventory import get_view
        from cronwarden.schedules.status import lease_skip_text

        async with _temporal_and_db() as (client, pool):
            data = await _describe_json(client, pool, await get_view(client, schedule_id))
        if as_json:
            emit_json(data)
            return
        lines = [
            f"schedule     {data['schedule_id']}"
            + ("" if data["managed"] else " (unmanaged: not created by cronwarden)"),
            f"job          {data['job'] or '-'}",
            f"spec         {data['spec']} (UTC)",
            f"policies     overlap {data['overlap']}, catchup window "
            f"{data['catchup_window'] or '-'}, pause on failure "
            f"{'yes' if data['pause_on_failure'] else 'no'}",
            f"paused       {'yes' if data['paused'] else 'no'}"
            + (f" ({data['note']})" if data["paused"] and data["note"] else ""),
            f"counters     skipped (overlap) {data['skipped_overlap']}, "
            f"missed (catchup window) {data['missed_catchup']}",
            "next fires   " + (", ".join(data["next_fire_times"]) or "none"),
        ]
        beat = data["heartbeat"]
        if beat is not None:
            lines.append(
                f"heartbeat    last success {beat['last_logical_key'] or 'never'}, next expected "
                f"{beat['next_expected_at'] or '-'}, last error {beat['last_error'] or '-'}"
            )
            lines.append(
                "             " + lease_skip_text(beat["skipped_lease"], beat["last_lease_skip"])
            )
        lines.append("recent runs" + ("" if data["recent_runs"] else "  none"))
        lines += [
            f"  {r['logical_key']}  {r['status']}"
            + (f" ({r['outcome']})" if r["outcome"] else "")
            + {True: ", committed", False: ", not committed", None: ""}[r["committed"]]
            for r in data["recent_runs"]
        ]
        if beat is not None and beat["last_replay_key"]:
            lines.append(
                f"last replay  {beat['last_replay_key']}, committed {beat['last_replay_at']}"
            )
        out.print(escape("\n".join(lines)))

    run_command(go)


@schedules_app.command("pause")
def schedules_pause(
    schedule_id: IdArgument,
    reason: Annotated[
        str | None, typer.Option("--reason", help="Why; shown by `status` and in Temporal.")
    ] = None,
) -> None:
    """Pause a schedule as an operator: the absence monitor stays silent until `unpause`."""

    async def go() -> None:
        from cronwarden.schedules import operations

        async with _temporal_and_db() as (client, pool):
            v = await operations.pause(client, pool, schedule_id, reason=reason)
        out.print(escape(f"{schedule_id}: paused ({v.note})"))

    run_command(go)


@schedules_app.command("unpause")
def schedules_unpause(schedule_id: IdArgument) -> None:
    """Resume a schedule; the next expected fire is counted from now."""

    async def go() -> None:
        from cronwarden.schedules import operations

        async with _temporal_and_db() as (client, pool):
            v = await operations.unpause(client, pool, schedule_id)
        nxt = _iso(v.next_fire_times[0]) if v.next_fire_times else "none"
        out.print(escape(f"{schedule_id}: unpaused, next fire {nxt}"))

    run_command(go)


@schedules_app.command("trigger")
def schedules_trigger(schedule_id: IdArgument, as_json: JsonOption = False) -> None:
    """Start a run now, with the schedule's overlap policy."""

    async def go() -> None:
        from cronwarden.schedules import operations

        async with _temporal() as client:
            t = await operations.trigger(client, schedule_id)
        if as_json:
            emit_json(
                {
                    "schedule_id": t.schedule_id,
                    "workflow_id": t.workflow_id,
                    "logical_key": t.logical_key,
                    "fire_time": _iso(t.fire_time),
                    "note": t.note,
                }
            )
            return
        if t.workflow_id is None:
            out.print(escape(f"{schedule_id}: triggered, {t.note}"))
            return
        out.print(
            escape(
                f"{schedule_id}: triggered run {t.workflow_id}, logical key {t.logical_key} "
                f"({t.note})"
            )
        )

    run_command(go)


@schedules_app.command("delete")
def schedules_delete(
    schedule_id: IdArgument,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete a schedule and its heartbeat row. The outbox keeps the history of its runs."""

    async def go() -> None:
        from cronwarden.schedules import operations

        async with _temporal_and_db() as (client, pool):
            # Checked before asking: no confirmation for a schedule that cannot be deleted.
            in_temporal = await operations.delete_target(client, pool, schedule_id)
            what = "schedule" if in_temporal else "leftover heartbeat row of the deleted schedule"
            if not yes:
                if not sys.stdin.isatty():
                    raise _usage(
                        f"refusing to delete '{schedule_id}' without confirmation: pass --yes"
                    )
                if not typer.confirm(f"Delete the {what} '{schedule_id}'?"):
                    out.print("nothing deleted")
                    raise typer.Exit(1)
            in_temporal = await operations.delete(client, pool, schedule_id)
        if in_temporal:
            out.print(escape(f"{schedule_id}: deleted (its outbox history is kept)"))
        else:
            out.print(
                escape(
                    f"{schedule_id}: not in Temporal; its leftover heartbeat row is deleted "
                    "(its outbox history is kept)"
                )
            )

    run_command(go)


def _usage(message: str) -> typer.Exit:
    from cronwarden.cli.support import fail
    from cronwarden.errors import EXIT_INVALID

    return fail(message, EXIT_INVALID)


def _zone(name: str | None) -> tzinfo:
    if name is None or name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(
            f"unknown time zone '{name}' (use an IANA name such as Europe/Paris)"
        ) from None


def status_command(
    as_json: JsonOption = False,
    tz: Annotated[
        str | None,
        typer.Option("--tz", help="Display times in this zone (display only; triggers stay UTC)."),
    ] = None,
) -> None:
    """One table of every schedule: pause, last success, next expected fire and health."""

    async def go() -> None:
        from cronwarden.schedules.status import dead_letter_json, incident_json, status_rows
        from cronwarden.store import definitions, heartbeats, incidents, notifications

        zone = _zone(tz)
        async with _temporal_and_db() as (client, pool):
            async with pool.acquire() as conn:
                beats = await heartbeats.all_rows(conn)
                recorded = await definitions.latest_all(conn)
                open_incidents = await incidents.open_incidents(conn)
                dead = await notifications.dead_letters(conn)
            by_schedule = {i["schedule_id"]: i for i in open_incidents if i["schedule_id"]}
            now = datetime.now(UTC)
            rows = await status_rows(client, beats, recorded, now=now, incidents=by_schedule)
        system = [i for i in open_incidents if i["schedule_id"] is None]
        if as_json:
            emit_json(
                {
                    "generated_at": _iso(now),
                    "system_incident": incident_json(system[0]) if system else None,
                    "schedules": [r.as_json() for r in rows],
                    "dead_letters": [dead_letter_json(d) for d in dead],
                }
            )
            return
        _print_status(
            rows, zone=zone, now=now, system_incident=system[0] if system else None, dead=dead
        )

    run_command(go)


def _print_status(
    rows: list[StatusRow],
    *,
    zone: tzinfo,
    now: datetime,
    system_incident: dict[str, Any] | None = None,
    dead: list[dict[str, Any]] | None = None,
) -> None:
    from cronwarden.schedules.status import (
        dead_letter_text,
        display_time,
        incident_text,
        pause_text,
        success_text,
    )

    if not rows:
        out.print("no schedules")
        return
    zone_name = "UTC" if zone is UTC else str(zone)
    table = Table(
        "id",
        "spec",
        "overlap",
        "paused",
        "last success",
        f"next expected ({zone_name})",
        "health",
        "incident",
        "last error",
        "skipped / missed",
    )
    for r in rows:
        style = HEALTH_STYLE.get(r.health, "")
        table.add_row(
            escape(r.schedule_id + ("" if r.managed else " (unmanaged)")),
            escape(r.spec),
            r.overlap or "-",
            escape(pause_text(r)),
            escape(success_text(r)),
            display_time(r.next_expected_at, zone),
            f"[{style}]{r.health}[/]" if style else r.health,
            escape(incident_text(r)),
            escape(_clip(r.last_error or "-", 50)),
            _counters_text(r) + (f" (+{r.lease_skips} at the lease)" if r.lease_skips else ""),
        )
    out.print(f"cronwarden status at {display_time(now, zone)}")
    if system_incident is not None:
        out.print(
            f"[bold red]open system incident #{system_incident['id']}[/]: "
            f"{escape(system_incident['summary'])}"
        )
    print_wide(table)
    if dead:
        # Pages that never reached a sink: someone must look, the monitor will not retry them.
        out.print(f"[bold red]{len(dead)} notification(s) could not be delivered[/] (last 7 days):")
        for d in dead[:10]:
            out.print(f"  {escape(dead_letter_text(d, zone))}")


def _counters_text(row: StatusRow) -> str:
    if row.skipped_overlap is None or row.missed_catchup is None:
        return "-"  # not read: a healthy schedule is not described (`schedules describe ID`)
    return f"{row.skipped_overlap} / {row.missed_catchup}"


def _clip(text: str, limit: int) -> str:
    # The table stays scannable; `status --json` and `schedules describe` carry the full text.
    return text if len(text) <= limit else text[: limit - 1] + "…"
