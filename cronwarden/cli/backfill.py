"""`cronwarden backfill plan|run` and `cronwarden audit`."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cronwarden.backfill.window import (
    DueCap,
    Window,
    due_cap,
    make_window,
    parse_instant,
    parse_since,
)
from cronwarden.cli.changes import ActorOption, ReasonOption, record_after, who
from cronwarden.cli.support import (
    duration_flag,
    emit_json,
    err,
    load_settings,
    out,
    run_command,
)
from cronwarden.errors import EXIT_FAILED, CronwardenError, InvalidInput
from cronwarden.times import duration_text, utc_text

if TYPE_CHECKING:
    # Imported for types only: the CLI starts without loading the Temporal SDK or asyncpg.
    import asyncpg
    from temporalio.client import Client

    from cronwarden.activities.jobs import JobRegistry
    from cronwarden.backfill.audit import Audit
    from cronwarden.backfill.causes import Causes
    from cronwarden.backfill.plan import GoneSchedule, ManagedSchedule, Plan
    from cronwarden.schedules.overridden_args import OverriddenArgs
    from cronwarden.store.change_log import Entry

backfill_app = typer.Typer(
    help="List the fire times that never committed, and replay exactly those.",
    no_args_is_help=True,
)

# Above this many keys, `backfill run` asks before replaying (or needs --yes).
CONFIRM_ABOVE = 100

ScheduleId = Annotated[str, typer.Argument(help="Schedule id.")]
Start = Annotated[
    str, typer.Option("--start", help="Window start: ISO 8601 with a zone, `now` or `-2h`.")
]
End = Annotated[
    str,
    typer.Option(
        "--end",
        help="Window end (inclusive), at most `now`; capped at what is due by Temporal's clock "
        "and the schedule's next fire.",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
PastHorizon = Annotated[
    bool,
    typer.Option(
        "--past-horizon",
        help="Accept a window reaching back past the outbox's dedupe horizon "
        "(CRONWARDEN_OUTBOX_RETENTION): refused without it. Keys before the horizon are "
        "listed, never replayed.",
    ),
]


@dataclass
class Context:
    client: Client
    pool: asyncpg.Pool
    schedule: ManagedSchedule | GoneSchedule
    zone: str | None = None
    """A zoned schedule's zone (None: UTC): its fire times are shown in local time too."""

    async def cap(self) -> DueCap:
        """The last fire time due, by Temporal's clock and the schedule's progress as described
        on connecting: both only move on after that, so the cap can be early, never late. A
        schedule Temporal no longer holds has no progress: Temporal's clock alone."""
        from cronwarden.backfill.window import temporal_now

        desc = self.schedule.description
        if desc is None:
            return due_cap(await temporal_now(self.client), [], None, paused=False)
        return due_cap(
            await temporal_now(self.client),
            desc.info.next_action_times,
            desc.schedule.spec.jitter,
            paused=desc.schedule.state.paused,
        )

    def live(self) -> ManagedSchedule:
        """The schedule as Temporal holds it; refuses one known only from its history."""
        from cronwarden.backfill.plan import GoneSchedule

        schedule = self.schedule
        if isinstance(schedule, GoneSchedule):
            when = f" at {utc_text(schedule.deleted_at)}" if schedule.deleted_at else ""
            raise InvalidInput(
                f"schedule '{schedule.schedule_id}' was deleted{when}: nothing replayed (a replay "
                "needs the live schedule's workers and lease). `backfill plan` and `audit` still "
                "show its missed fires; re-create it with `schedules apply` to replay them"
            )
        return schedule


@asynccontextmanager
async def _connected(schedule_id: str) -> AsyncIterator[Context]:
    """Connected to both, with the schedule: as Temporal holds it, or, once deleted, as its
    recorded history knows it (for `plan` and `audit`)."""
    from cronwarden import temporal
    from cronwarden.backfill.plan import load_gone, load_managed
    from cronwarden.schedules.inventory import NoSuchSchedule
    from cronwarden.store.pool import create_pool

    settings = load_settings()
    client = await temporal.connect(settings)
    schedule: ManagedSchedule | GoneSchedule
    try:
        schedule = await load_managed(client, schedule_id)
        pool = await create_pool(settings.dsn, max_size=2)
    except NoSuchSchedule:
        pool = await create_pool(settings.dsn, max_size=2)
        async with pool.acquire() as conn:
            gone = await load_gone(conn, schedule_id)
        if gone is None:
            await pool.close()
            raise
        schedule = gone
    try:
        yield Context(client, pool, schedule, await _zone_of(pool, schedule))
    finally:
        await pool.close()


async def _zone_of(pool: asyncpg.Pool, schedule: ManagedSchedule | GoneSchedule) -> str | None:
    """The zone of the definition Temporal holds, or of a deleted schedule's last one."""
    from cronwarden.backfill.plan import ManagedSchedule
    from cronwarden.schedules.local_times import zone_of_definition
    from cronwarden.store import definitions

    if isinstance(schedule, ManagedSchedule):
        return zone_of_definition(schedule.run_input.zone)
    async with pool.acquire() as conn:
        rows = await definitions.history(conn, schedule.schedule_id)
    lived = [definition for _, _, definition, deleted in rows if not deleted]
    return zone_of_definition(lived[-1]) if lived else None


def _window(start: str, end: str) -> Window:
    now = datetime.now(UTC)
    return make_window(
        parse_instant(start, now=now, what="--start"),
        parse_instant(end, now=now, what="--end"),
        now=now,
    )


def _horizon(requested: Window, past_horizon: bool) -> Window:
    """The part of the window a replay may take (see `within_horizon`); refuses a window past
    the horizon without --past-horizon, and says so when it cuts one."""
    from cronwarden.backfill.window import within_horizon

    kept = within_horizon(
        requested,
        now=datetime.now(UTC),
        retention=load_settings().outbox_retention,
        past_horizon=past_horizon,
    )
    if kept != requested:
        err.print(
            f"fires before {utc_text(kept.start)} are past the outbox's dedupe horizon: their "
            "records may be gone, so they are never replayed"
        )
    return kept


def plan_json(p: Plan, cap: DueCap | None = None, zone: str | None = None) -> dict[str, Any]:
    """The plan's `--json` document; its key list is an iterator, formatted as it is written.
    A zoned schedule's has `timezone` and each key's local time (`missing_keys_local`)."""
    from cronwarden.schedules.local_times import keys_local

    capped = {"cap": cap.as_json()} if cap is not None else {}
    zoned = (
        {
            "timezone": zone,
            # Its own iterator over the same keys: a year's keys are never held twice.
            "missing_keys_local": keys_local(p.schedule_id, p.iter_missing_keys(), zone),
        }
        if zone is not None
        else {}
    )
    return p.counts_json() | capped | {"missing_keys": p.iter_missing_keys()} | zoned


def _print_json(data: dict[str, Any]) -> None:
    # A year's window can list hundreds of thousands of keys: the document is written as it is
    # formatted (backfill/json_stream.py), never held whole. Not through rich either, which
    # parses and highlights every JSON token (seconds for 25,600 keys).
    from cronwarden.backfill.json_stream import dump

    dump(data, out.write_text)


# Lines written per call: one write per key is slow, one string of every key is a year's text.
_LINES_PER_WRITE = 4096


def _print_lines(lines: Iterable[str]) -> None:
    """Key lists, written as is, a chunk at a time: one rich `print` per key cost seconds on a
    year's window, and one joined string would hold every line at once."""
    chunk: list[str] = []
    for line in lines:
        chunk.append(f"{line}\n")
        if len(chunk) >= _LINES_PER_WRITE:
            out.write_text("".join(chunk))
            chunk.clear()
    out.write_text("".join(chunk))


def _print_cap(requested: Window, cap: DueCap) -> None:
    """Say where the window was cut, and why: the end asked for is not what was planned."""
    if cap.end >= requested.end:
        return
    reason = f"Temporal's clock reads {utc_text(cap.now)}"
    if cap.next_action_time is not None:
        jitter = f", jitter up to {duration_text(cap.jitter)}" if cap.jitter else ""
        reason += f", the schedule's next fire is {utc_text(cap.next_action_time)}{jitter}"
    out.print(f"  (capped at {utc_text(cap.end)}: {reason}; no later fire is due yet)")


def causes_json(causes: Causes, zone: str | None = None) -> dict[str, Any]:
    """The `causes` and `temporal_counts` keys of the plan's and the audit's `--json`; a zoned
    schedule's groups with the local time of their first and last slot."""
    from cronwarden.schedules.local_times import causes_with_local

    return {
        "causes": causes_with_local(causes.schedule_id, causes.as_json(), zone),
        "temporal_counts": causes.temporal,
    }


def _print_causes(causes: Causes | None, zone: str | None = None) -> None:
    from cronwarden.backfill.causes import causes_lines
    from cronwarden.schedules.local_times import causes_for_text

    if causes is not None and causes.groups:
        out.print("why, and what closes the gap:")
        if zone is None:
            _print_lines(causes.lines())
            return
        groups = causes_for_text(causes.schedule_id, causes.as_json(), zone)
        _print_lines(
            causes_lines(groups) + [f"  {t['note']}" for t in causes.temporal if t.get("note")]
        )


def _print_plan(
    p: Plan,
    requested: Window,
    cap: DueCap,
    *,
    keys: bool,
    causes: Causes | None = None,
    zone: str | None = None,
) -> None:
    from cronwarden.schedules.local_times import key_with_local

    window = p.window.as_json()
    out.print(f"{p.schedule_id}: window {window['start']} .. {window['end']}")
    if p.window.start != requested.start:
        out.print("  (starts after the schedule's creation: no fire was due before it)")
    _print_cap(requested, cap)
    paused = f", paused {len(p.paused)}" if p.paused else ""
    out.print(f"expected {p.expected}, done {p.done}, missing {len(p.missing)}{paused}")
    # Parts judged without a recorded definition, fires still within their jitter.
    _print_lines(p.notes())
    _print_causes(causes, zone)
    if keys:
        _print_lines(
            f"  {key_with_local(p.schedule_id, key, zone)}" for key in p.iter_missing_keys()
        )


@backfill_app.command("plan")
def backfill_plan(
    schedule_id: ScheduleId,
    start: Start,
    end: End,
    as_json: AsJson = False,
    past_horizon: PastHorizon = False,
) -> None:
    """List the fire times in the window that have no outbox record (never committed)."""

    async def go() -> None:
        from cronwarden.backfill.explain import explain_plan
        from cronwarden.backfill.plan import plan

        requested = _window(start, end)
        _horizon(requested, past_horizon)  # refuses; planned whole with --past-horizon
        async with _connected(schedule_id) as ctx:
            cap = await ctx.cap()
            # Temporal's `now` for the jitter rule too (a fire within its jitter is not missing).
            p = await plan(
                ctx.client, ctx.pool, ctx.schedule, requested.capped_to(cap), now=cap.now
            )
            causes = await explain_plan(ctx.client, ctx.pool, ctx.schedule, p, now=cap.now)
        if as_json:
            _print_json(plan_json(p, cap, ctx.zone) | causes_json(causes, ctx.zone))
        else:
            _print_plan(p, requested, cap, keys=True, causes=causes, zone=ctx.zone)

    run_command(go)


@backfill_app.command("run")
def backfill_run(
    schedule_id: ScheduleId,
    start: Start,
    end: End,
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="Replays in flight at once.")] = 4,
    lock_wait: Annotated[
        float,
        typer.Option(
            parser=duration_flag(),
            metavar="DURATION",
            show_default=False,
            help="How long a replay keeps retrying while the schedule's lease is held: 60s "
            "unless given (a bare number is seconds).",
        ),
    ] = 60.0,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be replayed, start nothing.")
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", help=f"Replay more than {CONFIRM_ABOVE} keys without asking.")
    ] = False,
    include_paused: Annotated[
        bool,
        typer.Option(
            "--include-paused",
            help="Replay even though the schedule is paused now (refused without it); the fires "
            "its pauses held stay held unless --include-held.",
        ),
    ] = False,
    include_held: Annotated[
        bool,
        typer.Option(
            "--include-held",
            help="Replay the fires that fell inside operator pauses too (held on purpose, so "
            "skipped without it).",
        ),
    ] = False,
    with_current_definition: Annotated[
        bool,
        typer.Option(
            "--with-current-definition",
            help="Replay keys that no recorded definition covers, or whose recorded definition "
            "ran another job, with the schedule's current definition (skipped without it).",
        ),
    ] = False,
    as_json: AsJson = False,
    past_horizon: PastHorizon = False,
    actor: ActorOption = None,
    reason: ReasonOption = None,
    args_file: Annotated[
        Path | None,
        typer.Option(
            "--args-file",
            help="A JSON object of args every replayed key runs instead of its definition's, "
            "checked against the job's model first (CRONWARDEN_JOBS). A key found done with "
            "other args is reported as an args conflict, never run again (exit 1).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Replay every fire time of the window that has no outbox record, and wait for each."""

    async def go() -> int:
        from cronwarden.activities.contract import OVERLAP_LOCKED
        from cronwarden.backfill.plan import plan
        from cronwarden.backfill.replay import FAILED
        from cronwarden.schedules.overridden_args import check_for_job, read_args_file

        by = who(actor, reason)
        # Read before connecting: a file that cannot be used starts nothing.
        given = read_args_file(args_file) if args_file is not None else None
        requested = _horizon(_window(start, end), past_horizon)
        if requested.empty:
            out.print("nothing to replay: the whole window is past the dedupe horizon")
            return 0
        async with _connected(schedule_id) as ctx:
            _refuse_paused(ctx.live(), include_paused)
            if given is not None:
                check_for_job(given, ctx.live().run_input.job, _job_registry())
            cap = await ctx.cap()
            # Temporal's `now` for the jitter rule too (a fire within its jitter is not missing).
            p = await plan(
                ctx.client, ctx.pool, ctx.schedule, requested.capped_to(cap), now=cap.now
            )
            if include_held and p.paused:
                # Asked for: the fires the operator's pauses held are replayed with the rest.
                p = p.with_paused_as_missing()
            if not as_json:
                _print_plan(p, requested, cap, keys=False)
            if dry_run:
                chooser = await _definitions(ctx, p, with_current_definition, given)
                _print_dry_run(p, as_json, cap, chooser)
                return 0
            if not p.missing:
                if as_json:
                    emit_json(_run_json(p, cap, None))
                else:
                    out.print("nothing to replay")
                return 0
            _confirm(len(p.missing), yes)
            chooser = await _definitions(ctx, p, with_current_definition, given)
            held = None if include_paused else _paused_meanwhile(ctx)
            summary = await _replay_with_progress(ctx, p, concurrency, lock_wait, chooser, held)
            await record_after(by, _backfill_entries(p, summary), pool=ctx.pool)
        if as_json:
            emit_json(_run_json(p, cap, summary))
        else:
            counts = summary.counts
            out.print(", ".join(f"{name} {n}" for name, n in counts.items()))
            for definition, n in summary.by_definition.items():
                out.print(f"  {n} key(s) ran {definition.text()}")
            for failure in summary.failures:
                out.print(f"  failed {failure.logical_key}: {failure.detail}")
            _print_conflicts(summary.conflicts)
            if summary.skipped:
                out.print(f"skipped {len(summary.skipped)} key(s), never replayed (exit 1):")
                _print_lines(f"  skipped {s.logical_key}: {s.detail}" for s in summary.skipped)
            if counts[OVERLAP_LOCKED]:
                out.print(
                    "overlap-locked keys found the schedule's lease held for the whole "
                    "--lock-wait and were never replayed (exit 1); run the same command again "
                    "to retry them"
                )
        # A key left overlap-locked or skipped never ran, and one done with other args did
        # not run with these: a script checking $? must not read that as done.
        return (
            EXIT_FAILED
            if summary.counts[FAILED]
            or summary.counts[OVERLAP_LOCKED]
            or summary.skipped
            or summary.conflicts
            else 0
        )

    code = run_command(go)
    if code:
        raise typer.Exit(code)


def _backfill_entries(p: Plan, summary: Any) -> list[Entry]:
    """The change-log entry of a replay that started runs; none when every key was already
    done, lease-locked or skipped: nothing ran, nothing changed."""
    from cronwarden.backfill.replay import FAILED, REPLAYED
    from cronwarden.store.change_log import BACKFILL, Entry

    counts = summary.counts
    if not counts[REPLAYED] and not counts[FAILED]:
        return []
    details = {
        "window": p.window.as_json(),
        "counts": dict(counts),
        "skipped": len(summary.skipped),
    }
    return [Entry(BACKFILL, p.schedule_id, details)]


def _refuse_paused(schedule: ManagedSchedule, include_paused: bool) -> None:
    """A schedule paused now is held on purpose (a migration, an incident): replaying its fires
    would run the very jobs the pause holds back. Only an explicit flag overrides that."""
    state = schedule.description.schedule.state
    if not state.paused or include_paused:
        return
    note = f' ("{state.note}")' if state.note else ""
    raise InvalidInput(
        f"schedule '{schedule.schedule_id}' is paused{note}: nothing replayed. Unpause it "
        "first, or pass --include-paused to replay the fires it missed while it stays paused "
        "(the fires its pause holds stay held unless --include-held)"
    )


def _print_dry_run(p: Plan, as_json: bool, cap: DueCap | None, chooser: Any) -> None:
    """What `run` would do, key by key: the definition each key would run (counted per
    definition) or why it would be skipped, exactly as `run` decides it."""
    from cronwarden.backfill.plan import keys_of
    from cronwarden.backfill.replay import would_run
    from cronwarden.schedules.run_ids import REPLAY_INFIX

    # `replay_workflow_id` of each key, formatted the fast way (the id is the key's time after
    # the replay infix), one at a time.
    workflow_ids = keys_of(p.schedule_id, p.missing, prefix=f"{p.schedule_id}{REPLAY_INFIX}")
    preview = would_run(chooser, p.missing)
    if as_json:
        _print_json(
            plan_json(p, cap)
            | {
                "dry_run": True,
                "workflow_ids": workflow_ids,
                "definitions": preview.definitions_json(),
                # An iterator, formatted as it is written (a year's keys may all be skipped).
                "skipped": (
                    {"logical_key": key, "reason": reason}
                    for key, reason in preview.iter_skipped(p.schedule_id)
                ),
            }
        )
        return
    _print_lines(
        f"  would replay {key} as {wid}"
        for key, wid in zip(p.iter_missing_keys(), workflow_ids, strict=True)
    )
    for definition, n in preview.by_definition.items():
        out.print(f"  {n} key(s) would run {definition.text()}")
    if preview.skipped_count:
        out.print(f"would skip {preview.skipped_count} key(s):")
        _print_lines(
            f"  skipped {key}: {reason}" for key, reason in preview.iter_skipped(p.schedule_id)
        )
    out.print("dry run: nothing started")


def _confirm(n: int, yes: bool) -> None:
    if n <= CONFIRM_ABOVE or yes:
        return
    if not sys.stdin.isatty():
        raise InvalidInput(
            f"{n} keys to replay (more than {CONFIRM_ABOVE}): pass --yes to replay them "
            "without a prompt"
        )
    if not typer.confirm(f"Replay {n} keys?", err=True):
        raise _Declined("nothing replayed")


class _Declined(CronwardenError):
    """The operator answered no: nothing was replayed."""


async def _definitions(
    ctx: Context, p: Plan, with_current: bool, given: OverriddenArgs | None = None
) -> Any:
    """Which definition each key's replay runs: the recorded one that judged its part of the
    window in the plan (backfill/replay.py `Definitions`), with `given` args (`--args-file`)
    in place of its own."""
    from cronwarden.backfill.plan import effective_history
    from cronwarden.backfill.replay import Definitions

    live = ctx.live()
    async with ctx.pool.acquire() as conn:
        # The history as the plan judged by it, rows Temporal proves lost included.
        history = await effective_history(ctx.client, conn, p.schedule_id, live.description)
    return Definitions(
        ctx.live(),
        p.judged,
        history,
        with_current=with_current,
        registry=_job_registry(),
        args=given,
    )


def _job_registry() -> JobRegistry | None:
    """The job modules `apply` checks against, when this host has them: each recorded
    definition (and `--args-file`) is checked the same way before its keys are replayed."""
    from cronwarden.activities.jobs import import_job_modules

    modules = load_settings().job_modules()
    return import_job_modules(modules) if modules else None


def _print_conflicts(conflicts: list[Any]) -> None:
    """Keys found done with other args than their replay's: reported, never run again."""
    if not conflicts:
        return
    out.print(
        f"args conflicts {len(conflicts)}: done with other args than the replay's, so "
        "reported and never run again (exit 1):"
    )
    _print_lines(f"  args conflict {c.logical_key}: {c.detail}" for c in conflicts)


def _paused_meanwhile(ctx: Context) -> Callable[[], Awaitable[str | None]]:
    """Whether `schedules pause` held the schedule since the run began, read from its heartbeat
    row at most once a second: an operator who pauses a schedule mid-backfill (a migration
    starting) stops the replays not started yet, as the refusal would have at the start."""
    from cronwarden.store import heartbeats

    seen: list[Any] = [-1.0, None]

    async def held() -> str | None:
        now = time.monotonic()
        if now - seen[0] >= 1.0:
            seen[0] = now
            async with ctx.pool.acquire() as conn:
                beat = await heartbeats.get(conn, ctx.schedule.schedule_id)
            seen[1] = (
                f'the schedule was paused while the replays ran ("{beat["paused_reason"]}"): '
                "not started; run the same command once it is unpaused"
                if beat is not None and beat["paused"]
                else None
            )
        reason: str | None = seen[1]
        return reason

    return held


async def _replay_with_progress(
    ctx: Context,
    p: Plan,
    concurrency: int,
    lock_wait: float,
    chooser: Any,
    held: Callable[[], Awaitable[str | None]] | None = None,
) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from cronwarden.backfill.replay import replay_all

    progress = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )
    with progress:
        task = progress.add_task("replaying", total=len(p.missing))
        return await replay_all(
            ctx.client,
            ctx.live(),
            p.missing_times(),
            concurrency=concurrency,
            lock_wait=lock_wait,
            on_result=lambda _: progress.advance(task),
            definitions=chooser,
            held=held,
        )


def _run_json(p: Plan, cap: DueCap, summary: Any) -> dict[str, Any]:
    from cronwarden.backfill.replay import OUTCOMES

    counts = summary.counts if summary is not None else dict.fromkeys(OUTCOMES, 0)
    return p.counts_json() | {
        "cap": cap.as_json(),
        "summary": counts,
        "failed": [
            {
                "logical_key": f.logical_key,
                "workflow_id": f.workflow_id,
                "error": f.detail,
                "definition": f.definition.as_json() if f.definition else None,
            }
            for f in (summary.failures if summary is not None else [])
        ],
        # Which definition the replays ran (a recorded one, or `current`), with their count.
        "definitions": summary.definitions_json() if summary is not None else [],
        "skipped": [
            {"logical_key": s.logical_key, "reason": s.detail}
            for s in (summary.skipped if summary is not None else [])
        ],
        # Keys done with other args than their replay's (each counted `already-done` too).
        "args_conflicts": [
            {"logical_key": c.logical_key, "workflow_id": c.workflow_id, "detail": c.detail}
            for c in (summary.conflicts if summary is not None else [])
        ],
    }


def audit_command(
    schedule_id: ScheduleId,
    since: Annotated[
        str, typer.Option("--since", help="Window start: `7d` (7 days ago), `-2h` or ISO 8601.")
    ] = "1d",
    as_json: AsJson = False,
    past_horizon: PastHorizon = False,
) -> None:
    """What should have run vs what committed, what is running, and what Temporal skipped."""

    async def go() -> None:
        from cronwarden.backfill.audit import audit

        now = datetime.now(UTC)
        requested = make_window(parse_since(since, now=now), now, now=now)
        _horizon(requested, past_horizon)  # refuses; audited whole with --past-horizon
        async with _connected(schedule_id) as ctx:
            cap = await ctx.cap()
            result = await audit(
                ctx.client, ctx.pool, ctx.schedule, requested.capped_to(cap), now=cap.now
            )
        if as_json:
            _print_json(
                result.as_json() | {"cap": cap.as_json()} | _audit_zone_json(result, ctx.zone)
            )
            return
        _print_audit(result, requested, cap, ctx.zone)

    run_command(go)


def _audit_zone_json(result: Audit, zone: str | None) -> dict[str, Any]:
    """A zoned schedule's audit keys: `timezone`, the local time of each listed key (a list
    `{name}_local` beside each `{name}`, its own iterator), and the causes' first and last."""
    from cronwarden.activities.contract import logical_key
    from cronwarden.schedules.local_times import causes_with_local, keys_local

    if zone is None:
        return {}
    sid = result.schedule_id
    # Each its own iterator over the keys (formatted as written, never held twice).
    lists: dict[str, Iterable[str]] = {
        "missing_keys": result.missing.keys(sid),
        "in_flight_keys": result.in_flight.keys(sid),
        "awaiting_jitter_keys": result.awaiting_jitter.keys(sid),
        "paused_keys": result.paused_fires.keys(sid),
        "skipped_lease_keys": [logical_key(sid, t) for t in result.lease_skipped],
    }
    return {
        "timezone": zone,
        **{f"{name}_local": keys_local(sid, keys, zone) for name, keys in lists.items()},
        "causes": causes_with_local(sid, result.causes.as_json() if result.causes else [], zone),
    }


def _print_audit(
    result: Audit,
    requested: Window | None = None,
    cap: DueCap | None = None,
    zone: str | None = None,
) -> None:
    from cronwarden.activities.contract import logical_key
    from cronwarden.schedules.local_times import key_with_local

    w, schedule_id = result.window.as_json(), result.schedule_id
    out.print(f"{schedule_id}: window {w['start']} .. {w['end']}")
    if requested is not None and cap is not None:
        _print_cap(requested, cap)
    out.print(
        f"should have run {result.expected}: committed {result.committed}, "
        f"running {len(result.in_flight)}, missing {len(result.missing)}"
    )
    _print_lines(result.notes())
    _print_causes(result.causes, zone)
    if result.committed_off_spec:
        out.print(f"committed at other times (manual triggers): {result.committed_off_spec}")
    if result.gone is not None:
        deleted = result.gone.deleted_at
        out.print(
            f"deleted at {utc_text(deleted)}: audited from its recorded history"
            if deleted
            else "not in Temporal (deleted outside cronwarden, time unknown): audited from its "
            "recorded history"
        )
    else:
        out.print(
            f"Temporal, since the schedule was created: {result.actions_total} actions, "
            f"{result.skipped_overlap_total} skipped (overlap), "
            f"{result.missed_catchup_window_total} missed (catchup window)"
            + (", paused" if result.paused else "")
        )
    last = result.last_lease_skip
    if result.lease_skips_total and last is not None:
        out.print(
            f"skipped at the lease (a shared lock's other holder, a stale holder): "
            f"{result.lease_skips_total}, last {last['logical_key']} held by "
            f"{last['holder'] or 'another run'}"
        )
    _print_lines(
        f"  running {key_with_local(schedule_id, key, zone)}"
        for key in result.in_flight.keys(schedule_id)
    )
    skipped = {logical_key(schedule_id, t) for t in result.lease_skipped}
    _print_lines(
        f"  skipped {key_with_local(schedule_id, key, zone)} "
        f"(lease held by {last['holder'] if last else None})"
        if key in skipped
        else f"  missing {key_with_local(schedule_id, key, zone)}"
        for key in result.missing.keys(schedule_id)
    )
