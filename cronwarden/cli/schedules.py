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

import typer
from rich.markup import escape
from rich.table import Table

from cronwarden.cli.changes import (
    ActorOption,
    ReasonOption,
    applied_entries,
    record_after,
    triggered_entry,
    who,
)
from cronwarden.cli.support import emit_json, load_settings, out, print_wide, run_command
from cronwarden.errors import InvalidInput
from cronwarden.times import utc_text_or_none

if TYPE_CHECKING:
    import asyncpg
    from temporalio.client import Client

    from cronwarden.schedules.apply import Change
    from cronwarden.schedules.operations import Triggered
    from cronwarden.schedules.status import StatusRow

schedules_app = typer.Typer(help="Register, inspect and operate schedules.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
IdArgument = Annotated[str, typer.Argument(help="Schedule id.", show_default=False)]

HEALTH_STYLE = {
    "ok": "green",
    "running": "green",
    "late": "yellow",
    "overdue": "bold red",
    "missing": "red",
    "paused": "cyan",
}


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
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Apply FILE even if it was applied before and another file has been applied "
            "since (a rollback to it).",
        ),
    ] = False,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Describe every schedule instead of trusting the schedule list for those it "
            "shows unchanged: also finds edits made outside cronwarden to a schedule's args, "
            "task queue or policies.",
        ),
    ] = False,
    as_json: JsonOption = False,
    actor: ActorOption = None,
    reason: ReasonOption = None,
) -> None:
    """Create, update (or with --prune delete) schedules to match FILE.

    A file with any bad entry applies nothing. A file applied before and superseded since by
    another is refused (exit 2) unless --force; applying the latest file again changes nothing.
    """

    async def go() -> None:
        from cronwarden import temporal
        from cronwarden.activities.jobs import import_job_modules
        from cronwarden.schedules.apply import ApplyIncomplete, apply_definitions
        from cronwarden.schedules.model import load_schedule_file
        from cronwarden.store.pool import create_pool

        by = who(actor, reason)
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
        # connections keep them from queueing behind each other, and one more holds the
        # apply's lock for its whole length.
        pool = None if dry_run else await create_pool(settings.dsn, max_size=5)
        try:
            try:
                changes = await apply_definitions(
                    client,
                    pool,
                    definitions,
                    task_queue=settings.task_queue,
                    dry_run=dry_run,
                    prune=prune,
                    verify=verify,
                    release=True,
                    force=force,
                )
            except ApplyIncomplete as stopped:
                # What did reach Temporal is a change made, recorded before the error is told.
                await record_after(by, applied_entries(stopped, file), pool=pool)
                raise
            if pool is not None:
                await record_after(by, applied_entries(changes, file), pool=pool)
        finally:
            if pool is not None:
                await pool.close()
        zones = {d.id: d.timezone for d in definitions if d.timezone is not None}
        _print_changes(changes, dry_run=dry_run, as_json=as_json, zones=zones)

    run_command(go)


def _print_changes(
    changes: list[Change],
    *,
    dry_run: bool,
    as_json: bool,
    zones: dict[str, str] | None = None,
) -> None:
    """`zones`: the zone of each zoned schedule of the file, whose fire times are shown on its
    wall clock too."""
    from cronwarden.schedules.local_times import local_or_none, with_local, zone_fields

    zones = zones or {}
    if as_json:
        emit_json(
            {
                "dry_run": dry_run,
                "changes": [
                    {
                        "schedule_id": c.schedule_id,
                        "action": c.action,
                        "changed_fields": c.changed_fields,
                        "next_fire": utc_text_or_none(c.next_fire),
                        "next_fires": [utc_text_or_none(t) for t in c.next_fires],
                        # Why a schedule whose end_at has passed fires no more, else null.
                        "finished": c.finished,
                        **zone_fields(zones.get(c.schedule_id), next_fire=c.next_fire),
                        **(
                            {
                                "next_fires_local": [
                                    local_or_none(t, zones[c.schedule_id]) for t in c.next_fires
                                ]
                            }
                            if c.schedule_id in zones
                            else {}
                        ),
                    }
                    for c in changes
                ],
            }
        )
        return
    prefix = "would be " if dry_run else ""
    for c in changes:
        zone = zones.get(c.schedule_id)
        if c.action == "finished":
            # Not created, dry run or not: a note, not a change.
            out.print(escape(f"{c.schedule_id}: finished, not created ({c.finished})"))
            continue
        detail = f" ({', '.join(c.changed_fields)})" if c.changed_fields else ""
        nxt = f", next fire {with_local(c.next_fire, zone)}" if c.next_fire else ""
        if c.next_fires:
            nxt = ", next fires " + ", ".join(with_local(t, zone) for t in c.next_fires)
        elif dry_run and c.action in ("created", "updated"):
            nxt = ", no fire ahead"
        note = f"; finished: {c.finished}" if c.finished else ""
        out.print(escape(f"{c.schedule_id}: {prefix}{c.action}{detail}{nxt}{note}"))
    if all(c.action in ("unchanged", "finished") for c in changes):
        out.print("nothing to change" if changes else "the file lists no schedules")


LabelOption = Annotated[
    list[str] | None,
    typer.Option(
        "--label",
        "-l",
        help="Only schedules with this label: key=value, or key for any value. Repeat to "
        "require several.",
        show_default=False,
    ),
]


@schedules_app.command("list")
def schedules_list(as_json: JsonOption = False, label: LabelOption = None) -> None:
    """Every schedule of the namespace; those cronwarden did not create are marked unmanaged."""

    async def go() -> None:
        from cronwarden.schedules.describe import listed, view_json
        from cronwarden.schedules.labels import labels_of
        from cronwarden.schedules.local_times import with_local, zone_of_definition
        from cronwarden.schedules.selectors import parse_selector, selected

        # Before connecting: a selector that cannot be read is refused with nothing asked.
        selector = parse_selector(label) if label else None
        async with _temporal_and_db() as (client, pool):
            views = selected(await listed(client, pool), selector)
        if as_json:
            # `labels` only on a labelled schedule: an unlabelled one's row keeps its shape.
            emit_json({"schedules": [_with_labels(view_json(v), v.definition) for v in views]})
            return
        if not views:
            out.print(f"no schedules with the labels {selector}" if selector else "no schedules")
            return
        # The labels column only when some schedule has labels: a fleet without any keeps
        # its table as it was.
        shown_labels = [_labels_text(labels_of(v.definition)) for v in views]
        columns = ["id", "job", "spec", "overlap", "paused", "next fire (UTC)"]
        table = Table(*columns, *(["labels"] if any(shown_labels) else []))
        for v, labels_text in zip(views, shown_labels, strict=True):
            table.add_row(
                escape(v.schedule_id),
                escape(v.job or ("-" if v.managed else "(unmanaged)")),
                escape(v.spec),
                v.overlap or "-",
                escape(f"yes: {v.note}" if v.paused and v.note else "yes" if v.paused else "no"),
                # A zoned schedule's next fire on its own wall clock too.
                with_local(
                    v.next_fire_times[0] if v.next_fire_times else None,
                    zone_of_definition(v.definition),
                ),
                *([escape(labels_text)] if any(shown_labels) else []),
            )
        print_wide(table)

    run_command(go)


def _labels_text(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _with_labels(row: dict[str, Any], definition: dict[str, Any] | None) -> dict[str, Any]:
    from cronwarden.schedules.labels import labels_of

    labels = labels_of(definition)
    return {**row, "labels": dict(sorted(labels.items()))} if labels else row


@schedules_app.command("describe")
def schedules_describe(schedule_id: IdArgument, as_json: JsonOption = False) -> None:
    """Spec, policies, pause, the next 5 fire times, recent runs and Temporal's counters."""

    async def go() -> None:
        from cronwarden.schedules.describe import described, slot_causes_lines
        from cronwarden.schedules.status import lease_skip_text

        async with _temporal_and_db() as (client, pool):
            data = await described(client, pool, schedule_id)
        if as_json:
            emit_json(data)
            return
        zone = data.get("timezone")
        lines = [
            f"schedule     {data['schedule_id']}"
            + ("" if data["managed"] else " (unmanaged: not created by cronwarden)"),
            f"job          {data['job'] or '-'}",
            f"spec         {data['spec']}" + ("" if zone else " (UTC)"),
            f"policies     overlap {data['overlap']}, catchup window "
            f"{data['catchup_window'] or '-'}, pause on failure "
            f"{'yes' if data['pause_on_failure'] else 'no'}",
            f"paused       {'yes' if data['paused'] else 'no'}"
            + (f" ({data['note']})" if data["paused"] and data["note"] else ""),
            f"counters     skipped (overlap) {data['skipped_overlap']}, "
            f"missed (catchup window) {data['missed_catchup']}",
            "next fires   " + (", ".join(_with_locals(data, "next_fire_times")) or "none"),
        ]
        beat = data["heartbeat"]
        if beat is not None:
            lines.append(
                f"heartbeat    last success {beat['last_logical_key'] or 'never'}"
                + _local_note(beat, "last_success_at")
                + f", next expected {beat['next_expected_at'] or '-'}"
                + _local_note(beat, "next_expected_at")
                + f", last error {beat['last_error'] or '-'}"
            )
            lines.append(
                "             " + lease_skip_text(beat["skipped_lease"], beat["last_lease_skip"])
            )
        lines.append("recent runs" + ("" if data["recent_runs"] else "  none"))
        lines += [
            f"  {r['logical_key']}{_local_note(r, 'scheduled_at')}  {r['status']}"
            + (f" ({r['outcome']})" if r["outcome"] else "")
            + {True: ", committed", False: ", not committed", None: ""}[r["committed"]]
            for r in data["recent_runs"]
        ]
        if beat is not None and beat["last_replay_key"]:
            lines.append(
                f"last replay  {beat['last_replay_key']}, committed {beat['last_replay_at']}"
            )
        if beat is not None and beat["last_replay_error"]:
            failed = beat["last_replay_error"]
            lines.append(
                f"replay error {failed['logical_key']} at {failed['at']}: {failed['error']}"
            )
        lines += slot_causes_lines(data["slot_causes"], schedule_id=schedule_id, zone=zone)
        out.print(escape("\n".join(lines)))

    run_command(go)


def _local_note(data: dict[str, Any], name: str) -> str:
    """` (local reading)` of a zoned schedule's `{name}_local` field; nothing for UTC."""
    local = data.get(f"{name}_local")
    return f" ({local})" if local else ""


def _with_locals(data: dict[str, Any], name: str) -> list[str]:
    """The UTC texts of a list field, each with its `{name}_local` reading when zoned."""
    locals_ = data.get(f"{name}_local") or [None] * len(data[name])
    return [f"{t} ({lt})" if lt else str(t) for t, lt in zip(data[name], locals_, strict=True)]


SelectedIdArgument = Annotated[
    str | None,
    typer.Argument(help="Schedule id (or select: --job, --label or --all).", show_default=False),
]
JobSelectOption = Annotated[
    str | None,
    typer.Option("--job", help="Every schedule of this job.", show_default=False),
]
AllOption = Annotated[bool, typer.Option("--all", help="Every schedule `apply` created here.")]


@schedules_app.command("pause")
def schedules_pause(
    schedule_id: SelectedIdArgument = None,
    reason: Annotated[
        str | None,
        typer.Option(
            "--reason",
            help="Why; shown by `status`, in Temporal and by `audit log`. Required with "
            "--job, --label or --all.",
        ),
    ] = None,
    actor: ActorOption = None,
    for_: Annotated[
        str | None,
        typer.Option(
            "--for",
            help="Pause this long (30m, 2h, 1d; at most 90d): the monitor unpauses it after.",
            show_default=False,
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--until",
            help="Pause until this time, with a zone (2026-11-30T04:00:00Z): the monitor "
            "unpauses it then.",
            show_default=False,
        ),
    ] = None,
    job: JobSelectOption = None,
    label: LabelOption = None,
    every: AllOption = False,
) -> None:
    """Pause a schedule (or every one --job, --label or --all selects) as an operator: the
    absence monitor stays silent until `unpause`, or with --for/--until until the monitor
    unpauses it."""

    async def go() -> None:
        from cronwarden.schedules import operations
        from cronwarden.schedules.pause_selection import selection, targets
        from cronwarden.schedules.timed_pause import pause_end

        by = who(actor, reason)
        chosen = selection(
            schedule_id, job=job, labels=label, every=every, reason=by.reason, command="pause"
        )
        end = pause_end(for_, until, now=datetime.now(UTC))
        ends = f", until {utc_text_or_none(end)}" if end is not None else ""
        async with _temporal_and_db() as (client, pool):
            for sid in await targets(client, pool, chosen):
                v = await operations.pause(client, pool, sid, reason=by.reason, who=by, until=end)
                out.print(escape(f"{sid}: paused ({v.note}){ends}"))

    run_command(go)


@schedules_app.command("unpause")
def schedules_unpause(
    schedule_id: SelectedIdArgument = None,
    actor: ActorOption = None,
    reason: ReasonOption = None,
    job: JobSelectOption = None,
    label: LabelOption = None,
    every: AllOption = False,
) -> None:
    """Resume a schedule (or every paused one --job, --label or --all selects); the next
    expected fire is counted from now."""

    async def go() -> None:
        from cronwarden.schedules import operations
        from cronwarden.schedules.pause_selection import selection, targets

        by = who(actor, reason)
        chosen = selection(
            schedule_id, job=job, labels=label, every=every, reason=by.reason, command="unpause"
        )
        async with _temporal_and_db() as (client, pool):
            for sid in await targets(client, pool, chosen, paused_only=True):
                v = await operations.unpause(client, pool, sid, who=by)
                nxt = utc_text_or_none(v.next_fire_times[0]) if v.next_fire_times else "none"
                out.print(escape(f"{sid}: unpaused, next fire {nxt}"))

    run_command(go)


@schedules_app.command("trigger")
def schedules_trigger(
    schedule_id: IdArgument,
    as_json: JsonOption = False,
    actor: ActorOption = None,
    reason: ReasonOption = None,
    args: Annotated[
        str | None,
        typer.Option(
            "--args",
            help="A JSON object of args for this run instead of the schedule's, checked against "
            "the job's model first (CRONWARDEN_JOBS); the run's outbox record holds their digest.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Start a run now, with the schedule's overlap policy."""

    async def go() -> None:
        from cronwarden.schedules import operations

        by = who(actor, reason)
        if args is not None:
            t = await _trigger_with_args(schedule_id, args)
        else:
            async with _temporal() as client:
                t = await operations.trigger(client, schedule_id)
        # Temporal alone starts the run: recorded once it has (a warning if Postgres is away).
        await record_after(by, [triggered_entry(t)])
        with_args = _args_fields(t)
        if as_json:
            emit_json(
                {
                    "schedule_id": t.schedule_id,
                    "workflow_id": t.workflow_id,
                    "logical_key": t.logical_key,
                    "fire_time": utc_text_or_none(t.fire_time),
                    "note": t.note,
                }
                | with_args
            )
            return
        if t.workflow_id is None:
            out.print(escape(f"{schedule_id}: triggered, {t.note}"))
            return
        given = f", args digest {with_args['args_digest']}" if with_args else ""
        ran = f", {with_args['outcome']}" if with_args.get("outcome") else ""
        out.print(
            escape(
                f"{schedule_id}: triggered run {t.workflow_id}, logical key {t.logical_key}"
                f"{given}{ran} ({t.note})"
            )
        )

    run_command(go)


async def _trigger_with_args(schedule_id: str, text: str) -> Triggered:
    """`trigger --args`: checked (JSON object, the job's model) before anything starts."""
    from cronwarden.activities.jobs import import_job_modules
    from cronwarden.schedules.args_trigger import trigger_with_args
    from cronwarden.schedules.overridden_args import parse_args_text

    given = parse_args_text(text)
    modules = load_settings().job_modules()
    registry = import_job_modules(modules) if modules else None
    async with _temporal() as client:
        return await trigger_with_args(client, schedule_id, given, registry)


def _args_fields(t: Triggered) -> dict[str, Any]:
    """`args_digest` and `outcome` of a trigger with --args (nothing for a plain trigger, whose
    JSON keeps its shape)."""
    from cronwarden.schedules.args_trigger import ArgsTriggered

    if not isinstance(t, ArgsTriggered):
        return {}
    return {"args_digest": t.args_digest, "outcome": t.outcome}


@schedules_app.command("delete")
def schedules_delete(
    schedule_id: IdArgument,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    actor: ActorOption = None,
    reason: ReasonOption = None,
) -> None:
    """Delete a schedule and its heartbeat row. The outbox keeps the history of its runs."""

    async def go() -> None:
        from cronwarden.schedules import operations

        by = who(actor, reason)
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
            in_temporal = await operations.delete(client, pool, schedule_id, who=by)
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


@schedules_app.command("preview")
def schedules_preview(
    file: Annotated[Path, typer.Argument(help="Schedule file (YAML).")],
    start: Annotated[
        str,
        typer.Option(
            "--from",
            help="Window start (included): ISO 8601 with a zone or Z, `now` or `-2h`.",
            show_default=False,
        ),
    ],
    end: Annotated[
        str,
        typer.Option("--to", help="Window end (excluded), after --from.", show_default=False),
    ],
    schedule_id: Annotated[
        str | None, typer.Option("--id", help="Only this schedule of FILE.", show_default=False)
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Every slot each schedule of FILE fires in [--from, --to), as Temporal will fire it.

    Each slot with its UTC time, its local time (zoned schedules), its logical key and what the
    daylight-saving rule did there. Writes only a paused scratch copy per schedule, deleted
    again. Exit 1 if Temporal's slots and the rule's ever differ (a bug, named).
    """

    async def go() -> None:
        from cronwarden import temporal
        from cronwarden.activities.jobs import import_job_modules
        from cronwarden.schedules.model import load_schedule_file
        from cronwarden.schedules.slot_preview import (
            preview,
            preview_json,
            preview_lines,
            preview_window,
            select,
        )

        settings = load_settings()
        first, last = preview_window(start, end, now=datetime.now(UTC))
        if not settings.job_modules():
            raise InvalidInput(
                "CRONWARDEN_JOBS is not set: preview reads the file as apply does, which needs "
                "the job modules to check each schedule's job and args"
            )
        registry = import_job_modules(settings.job_modules())
        definitions = select(load_schedule_file(file, registry), schedule_id)
        client = await temporal.connect(settings)
        previews = await preview(
            client, definitions, task_queue=settings.task_queue, start=first, end=last
        )
        if as_json:
            emit_json(preview_json(previews))
            return
        out.write_text("".join(f"{line}\n" for line in preview_lines(previews, first, last)))

    run_command(go)


def _usage(message: str) -> typer.Exit:
    from cronwarden.cli.support import fail
    from cronwarden.errors import EXIT_INVALID

    return fail(message, EXIT_INVALID)


def _zone(name: str | None) -> tzinfo:
    # The pinned tzdata wheel's zones, as schedules are compiled with, never the host's.
    from cronwarden.schedules import zones

    if name is None or name.upper() == "UTC":
        return UTC
    try:
        checked = zones.check_zone_name(name)
    except ValueError as exc:
        raise InvalidInput(f"--tz: {exc}") from None
    return UTC if checked in zones.UTC_NAMES else zones.load_zone(checked)


def status_command(
    as_json: JsonOption = False,
    tz: Annotated[
        str | None,
        typer.Option("--tz", help="Display times in this zone (display only; triggers stay UTC)."),
    ] = None,
) -> None:
    """One table of every schedule: pause, last success, next expected fire and health."""

    async def go() -> None:
        from cronwarden.schedules.status import status_report, zone_lines

        zone = _zone(tz)
        async with _temporal_and_db() as (client, pool):
            report = await status_report(client, pool, now=datetime.now(UTC))
        if as_json:
            emit_json(report.as_json())
            return
        _print_status(
            report.rows,
            zone=zone,
            now=report.generated_at,
            system_incident=report.system_incident,
            dead=report.dead_letters,
            zone_notes=zone_lines(report),
        )

    run_command(go)


def _print_status(
    rows: list[StatusRow],
    *,
    zone: tzinfo,
    now: datetime,
    system_incident: dict[str, Any] | None = None,
    dead: list[dict[str, Any]] | None = None,
    zone_notes: list[str] | None = None,
) -> None:
    from cronwarden.schedules.status import (
        dead_letter_text,
        display_time,
        expected_text,
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
            escape(expected_text(r, zone)),
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
    for line in zone_notes or []:
        # The zone database the local times come from, and horizons to re-apply before.
        out.print(escape(line))
    _print_missing(rows)
    replay_failures = [r for r in rows if r.last_replay_error]
    if replay_failures:
        # Apart from the table's "last error", which is the live schedule's: a replay re-ran a
        # past fire, and its failure says nothing about the fires Temporal starts.
        out.print("replays that failed (`backfill run`; not the live schedule's error):")
        for r in replay_failures:
            failed = r.last_replay_error or {}
            out.print(
                f"  {escape(r.schedule_id)} {escape(str(failed['logical_key']))}: "
                f"{escape(_clip(str(failed['error']), 200))}"
            )
    if dead:
        # Pages that never reached a sink: someone must look, the monitor will not retry them.
        out.print(f"[bold red]{len(dead)} notification(s) could not be delivered[/] (last 7 days):")
        for d in dead[:10]:
            out.print(f"  {escape(dead_letter_text(d, zone))}")


def _print_missing(rows: list[StatusRow]) -> None:
    """Recent slots that never committed, with why and the command that closes each gap."""
    from cronwarden.backfill.causes import causes_lines
    from cronwarden.schedules.local_times import causes_for_text, key_with_local

    missing = [r for r in rows if r.missing]
    if not missing:
        return
    out.print("missing slots (Temporal started them, nothing committed):")
    for r in missing:
        last = key_with_local(r.schedule_id, r.missing[-1], r.timezone)
        out.print(escape(f"  {r.schedule_id}: {len(r.missing)}, last {last}"))
        for line in causes_lines(causes_for_text(r.schedule_id, r.causes, r.timezone)):
            out.print(escape(f"  {line}"))


def _counters_text(row: StatusRow) -> str:
    if row.skipped_overlap is None or row.missed_catchup is None:
        return "-"  # not read: a healthy schedule is not described (`schedules describe ID`)
    return f"{row.skipped_overlap} / {row.missed_catchup}"


def _clip(text: str, limit: int) -> str:
    # The table stays scannable; `status --json` and `schedules describe` carry the full text.
    return text if len(text) <= limit else text[: limit - 1] + "…"
