"""Who changed what, on the command line: the `--actor` and `--reason` options of every command
that changes a schedule, recording a change where no Postgres write of the command's own holds
it, and `cronwarden audit log`.

`cronwarden audit` is a group of two: `audit log` (this module) and `audit fires` (what should
have run vs what committed, `cli/backfill.py`). Any first word that is not one of them is a
schedule id of `audit fires`, so `cronwarden audit ID --since 2d` reads as it always did; a
schedule named `log` or `fires` is audited as `cronwarden audit fires log`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from typer.core import TyperGroup

from cronwarden.actor import ACTOR_ENV, check_reason, resolve_actor
from cronwarden.cli.support import emit_json, err, load_settings, out, run_command

if TYPE_CHECKING:
    import asyncpg

    from cronwarden.schedules.apply import ApplyIncomplete, Change
    from cronwarden.schedules.operations import Triggered
    from cronwarden.store.change_log import Entry, Recorded, Who

# `audit ID` is `audit fires ID`: the command `audit` was before it had `log`.
FIRES = "fires"
# `audit log` without --limit: enough for a screen's worth of history, bounded for a large log.
DEFAULT_LIMIT = 100

ActorOption = Annotated[
    str | None,
    typer.Option(
        "--actor",
        help=f"Who makes the change, as `audit log` shows it (default: {ACTOR_ENV}, else the "
        "OS user@host).",
        show_default=False,
    ),
]
ReasonOption = Annotated[
    str | None,
    typer.Option(
        "--reason", help="Why; recorded with the change (`audit log`).", show_default=False
    ),
]


def who(actor: str | None, reason: str | None) -> Who:
    """The actor and reason of a command, checked before it changes anything."""
    from cronwarden.store.change_log import Who

    return Who(actor=resolve_actor(actor), reason=check_reason(reason))


async def record_after(
    who: Who, entries: Sequence[Entry], *, pool: asyncpg.Pool | None = None
) -> None:
    """Record changes that already happened in Temporal, with no Postgres write of the command
    to share a transaction with. A failure to record does not undo nor fail the change: it is
    said on stderr, and the command keeps its exit code."""
    from cronwarden.logs import get_logger
    from cronwarden.store import change_log
    from cronwarden.store.pool import connect

    if not entries:
        return
    try:
        if pool is not None:
            async with pool.acquire() as conn:
                await change_log.record(conn, who, entries)
        else:
            conn = await connect(load_settings().dsn)
            try:
                await change_log.record(conn, who, entries)
            finally:
                await conn.close()
    except Exception as exc:
        # The change is done; only its record is missing.
        get_logger("cronwarden.changes").warning(
            "change_log.not_recorded", actions=[e.action for e in entries], error=str(exc)
        )
        err.print(
            escape(
                f"warning: done, but not recorded in the change log ({exc}); "
                "`audit log` will not show it"
            )
        )


def applied_entries(done: list[Change] | ApplyIncomplete, file: Path) -> list[Entry]:
    """One change-log entry per schedule an apply created, updated or deleted (an unchanged one
    is no change); of an apply stopped midway, each schedule it wrote to Temporal."""
    from cronwarden.schedules.apply import CREATED, DELETED, UPDATED, ApplyIncomplete
    from cronwarden.store.change_log import APPLY, Entry

    source = {"file": str(file)}
    if isinstance(done, ApplyIncomplete):
        written = [(sid, CREATED) for sid in done.created]
        written += [(sid, UPDATED) for sid in done.updated]
        # Written to Temporal, its rows not: created or updated, the error does not say.
        written += [(sid, "written") for sid in done.unrecorded]
        return [
            Entry(APPLY, sid, {**source, "change": change, "incomplete": True})
            for sid, change in written
        ]
    return [
        Entry(
            APPLY, c.schedule_id, {**source, "change": c.action, "changed_fields": c.changed_fields}
        )
        for c in done
        if c.action in (CREATED, UPDATED, DELETED)
    ]


def triggered_entry(t: Triggered) -> Entry:
    """The change-log entry of a trigger that started a run: its key (or buffered), and with
    `--args` the digest of the args it ran with (the outbox record holds the same)."""
    from cronwarden.store.change_log import TRIGGER, Entry

    details: dict[str, object] = {
        "logical_key": t.logical_key,
        "workflow_id": t.workflow_id,
        "buffered": t.workflow_id is None,
    }
    digest = getattr(t, "args_digest", None)  # a trigger with --args (schedules.args_trigger)
    if digest is not None:
        details["args_digest"] = digest
    return Entry(TRIGGER, t.schedule_id, details)


class _AuditGroup(TyperGroup):
    """`audit`'s subcommands, with `fires` as the default: a first word that names none of them
    (a schedule id, an option) is `audit fires …`'s."""

    # `ctx` untyped: typer's vendored click Context, not importable by a public name.
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = [FIRES, *args]
        return super().parse_args(ctx, args)


audit_app = typer.Typer(
    cls=_AuditGroup,
    help="`audit ID`: what should have run vs what committed (`audit fires ID`). "
    "`audit log [ID]`: who changed what.",
    no_args_is_help=True,
)


@audit_app.command("log")
def audit_log(
    schedule_id: Annotated[
        str | None,
        typer.Argument(
            help="Only this schedule's changes (default: every change).", show_default=False
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Only changes since: `7d` (7 days ago), `-2h` or ISO 8601 (default: ever).",
            show_default=False,
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=100_000, help="At most this many, the newest.")
    ] = DEFAULT_LIMIT,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Who changed what and why, newest first (from Postgres alone).

    Every `schedules apply`, `pause`, `unpause`, `trigger`, `delete` and `backfill run` records
    its changes: the actor (--actor, CRONWARDEN_ACTOR or user@host), the reason, the details.
    """

    async def go() -> None:
        from datetime import UTC, datetime

        from cronwarden.backfill.window import parse_since
        from cronwarden.errors import InvalidInput
        from cronwarden.store import change_log
        from cronwarden.store.pool import connect

        if schedule_id is not None and not schedule_id.strip():
            raise InvalidInput("the schedule id is empty: name one, or leave it out for all")
        start = None if since is None else parse_since(since, now=datetime.now(UTC))
        conn = await connect(load_settings().dsn)
        try:
            found = await change_log.listed(conn, schedule_id=schedule_id, since=start, limit=limit)
        finally:
            await conn.close()
        if as_json:
            emit_json({"changes": [c.as_json() for c in found]})
            return
        _print_log(found, limit=limit)

    run_command(go)


def _print_log(found: list[Recorded], *, limit: int) -> None:
    import json

    from cronwarden.times import utc_text

    if not found:
        out.print("no change recorded")
        return
    for c in found:
        line = f"{utc_text(c.at)}  {c.action:<8} {c.schedule_id or '(file)'}  by {c.actor}"
        if c.reason:
            line += f"  reason: {c.reason}"
        if c.details:
            line += "  " + ", ".join(
                f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in sorted(c.details.items())
            )
        out.print(escape(line))
    if len(found) == limit:
        out.print(f"(the newest {limit}; --limit or --since for others)")
