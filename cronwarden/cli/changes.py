"""Who changed what, on the command line: the `--actor` and `--reason` options of every command
that changes a schedule, recording a change where no Postgres write of the command's own holds
it, and `cronwarden audit log`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from cronwarden.actor import ACTOR_ENV, check_reason, resolve_actor
from cronwarden.cli.support import err, load_settings

if TYPE_CHECKING:
    import asyncpg

    from cronwarden.schedules.apply import ApplyIncomplete, Change
    from cronwarden.schedules.operations import Triggered
    from cronwarden.store.change_log import Entry, Who

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
    """The change-log entry of a trigger Temporal accepted: the run's key, or buffered."""
    from cronwarden.store.change_log import TRIGGER, Entry

    return Entry(
        TRIGGER,
        t.schedule_id,
        {
            "logical_key": t.logical_key,
            "workflow_id": t.workflow_id,
            "buffered": t.workflow_id is None,
        },
    )
