"""`schedules apply`: create-or-update each schedule of a file, idempotently.

Validation happened before we get here (a file with any bad entry never reaches Temporal).
A second apply of the same file makes no write to Temporal, and costs one read of Temporal's
schedule list: a schedule is unchanged, without a describe, when the list shows it as ours with
the spec and workflow type recorded at its last apply, and Postgres records that it holds the
file's definition (`_unchanged_by_list`). Every other schedule is described and its action
memo's digest compared, as `--verify` does for all of them.

A file applied before and superseded since by another is refused unless forced
(`store/applied.py`): an old release's apply run again must not undo a newer one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from temporalio.api.workflowservice.v1 import UpdateScheduleRequest
from temporalio.client import (
    Client,
    Schedule,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.service import RPCError, RPCStatusCode

from cronwarden.activities.contract import DIGEST_MEMO
from cronwarden.errors import CronwardenError, InvalidInput
from cronwarden.logs import get_logger
from cronwarden.schedules import schedule_list
from cronwarden.schedules.bounded import Outcome, map_bounded, try_bounded
from cronwarden.schedules.duplicates import duplicates_of_existing
from cronwarden.schedules.inventory import (
    DESCRIBE_CONCURRENCY,
    NotManaged,
    ScheduleView,
    action_memo,
    describe_many,
    describe_or_none,
    is_managed,
    is_managed_or_refuse,
    view,
)
from cronwarden.schedules.lives import delete_schedule
from cronwarden.schedules.mapping import (
    DEFINITION_MEMO,
    MANAGED_MEMO,
    ZONE_COMPILED,
    definition_digest,
    definition_json,
    to_temporal,
)
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.schedules.preview import next_fire_times
from cronwarden.schedules.schedule_list import Listed, described_listed_digest
from cronwarden.schedules.zones import compiled_until
from cronwarden.store import applied, heartbeats
from cronwarden.store import definitions as definition_history
from cronwarden.times import utc_text, utc_text_or_none

log = get_logger("cronwarden.schedules")

CREATED = "created"
UPDATED = "updated"
UNCHANGED = "unchanged"
DELETED = "deleted"
# A finished entry (its end_at has passed) that Temporal does not hold: nothing is created.
FINISHED = "finished"

__all__ = [
    "ApplyIncomplete",
    "NotManaged",
    "apply_definitions",
    "describe_or_none",
    "is_managed",
]


# The fields the duplicate guard compares (schedules/duplicates.py).
_DUPLICATE_FIELDS = {"job", "cron", "every", "args", "start_at", "end_at"}
# Each attempt re-reads the schedule; a schedule still changing after this many is reported.
UPDATE_ATTEMPTS = 5
# Creates and updates in flight at once. One at a time, a thousand new schedules spent ~50 s on
# round trips while the server idled between them. Each write costs the server a scheduler
# workflow (start or signal) and a query: on the 2-core dev stack 8 in flight gave ~67 ms per
# create, 32 gave ~46 ms, and more only queue at the server; a production frontend also
# rate-limits a namespace's RPCs, which a burst of thousands would hit.
WRITE_CONCURRENCY = 16
# Up to this many new schedules are described after their create; more are read from the list.
DESCRIBE_AT_MOST = 20
# How long the list may take to show new schedules with their first fires, and how often it is
# read meanwhile.
LIST_WAIT = 30.0
LIST_POLL = 0.5


class ScheduleBusy(CronwardenError):
    """Every update attempt met a concurrent change of the schedule."""


class SupersededFile(InvalidInput):
    """The file was applied before and another file was applied after it."""


class DuplicateSchedules(InvalidInput):
    """New schedules that would run the same job on the same trigger with the same args as
    schedules already in Temporal."""


@dataclass
class Change:
    schedule_id: str
    action: str
    changed_fields: list[str] = field(default_factory=list)
    next_fire: datetime | None = None
    next_fires: list[datetime] = field(default_factory=list)
    """With --dry-run, for a created or updated schedule: Temporal's next nominal fire times."""
    replaced: tuple[datetime, datetime, str, dict[str, Any]] | None = field(
        default=None, repr=False
    )
    """For an update: (created at, last written at, digest, definition) of what it replaces."""
    """For an update: when the schedule was created, and the digest and definition it held."""
    finished: str | None = None
    """For an entry whose end_at has passed: why it fires no more (shown with its action)."""


def _changed_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    keys = sorted(set(old) | set(new))
    return [k for k in keys if old.get(k) != new.get(k)]


# The changed field an update names when only the spec Temporal holds differs from the one
# recorded at the last apply: an edit outside cronwarden that kept the memo.
EDITED_OUTSIDE = "spec edited outside cronwarden"


def _edited_outside(desc: ScheduleDescription, expected_listed: str | None) -> bool:
    """Whether Temporal holds another spec or workflow type than the last apply saw, for the
    same definition (`expected_listed`: its listed digest then; None when not recorded)."""
    return expected_listed is not None and described_listed_digest(desc) != expected_listed


async def plan_one(
    client: Client,
    defn: ScheduleDefinition,
    *,
    task_queue: str,
    expected_listed: str | None = None,
) -> tuple[Change, ScheduleDescription | None]:
    desc = await describe_or_none(client, defn.id)
    if desc is None:
        return Change(defn.id, CREATED), None
    if not await is_managed_or_refuse(desc):
        raise NotManaged(
            f"schedule '{defn.id}' exists in Temporal but was not created by cronwarden; "
            "it is left alone: delete it yourself or give this schedule another id"
        )
    memo = await action_memo(client, desc)
    if memo.get(DIGEST_MEMO) == definition_digest(defn, task_queue=task_queue):
        if _edited_outside(desc, expected_listed):
            # The memo still names the file's definition, the spec is not the one it wrote.
            return Change(defn.id, UPDATED, [EDITED_OUTSIDE]), desc
        return Change(defn.id, UNCHANGED), desc
    old = memo.get(DEFINITION_MEMO)
    fields = _changed_fields(
        old if isinstance(old, dict) else {}, definition_json(defn, task_queue=task_queue)
    )
    replaced = None
    digest = memo.get(DIGEST_MEMO)
    if isinstance(old, dict) and isinstance(digest, str):
        written = desc.info.last_updated_at or desc.info.created_at
        replaced = (desc.info.created_at, written, digest, old)
    return Change(defn.id, UPDATED, fields, replaced=replaced), desc


def _updater(
    client: Client,
    defn: ScheduleDefinition,
    schedule: Schedule,
    *,
    task_queue: str,
    expected_listed: str | None = None,
) -> Callable[[ScheduleUpdateInput], Awaitable[ScheduleUpdate | None]]:
    digest = definition_digest(defn, task_queue=task_queue)

    async def update(inp: ScheduleUpdateInput) -> ScheduleUpdate | None:
        # Judged on the description the SDK just fetched, not on our earlier look: the schedule
        # may have been created (by someone else) or updated (by a concurrent apply) since.
        current = inp.description
        if not await is_managed_or_refuse(current):
            raise NotManaged(
                f"schedule '{defn.id}' exists in Temporal but was not created by cronwarden; "
                "it is left alone"
            )
        if (await action_memo(client, current)).get(DIGEST_MEMO) == digest and not _edited_outside(
            current, expected_listed
        ):
            return None
        # Keep the live state: re-applying a file must not undo an operator's pause.
        schedule.state = current.schedule.state
        return ScheduleUpdate(schedule=schedule)

    return update


async def send_update(client: Client, desc: ScheduleDescription, schedule: Schedule) -> None:
    """Replace the schedule with `schedule`, unless it changed since `desc` was read.

    The SDK's `handle.update` sends no conflict token, so a pause (or pause_on_failure) landing
    between its describe and its update would be overwritten with the state read before it.
    With the token, Temporal drops such an update instead (older servers silently: the caller
    checks the outcome).
    """
    request = UpdateScheduleRequest(
        namespace=client.namespace,
        schedule_id=desc.id,
        # The SDK's own conversion (payloads through the client's data converter).
        schedule=await schedule._to_proto(client),
        conflict_token=desc.raw_description.conflict_token,
        identity=client.identity,
        request_id=str(uuid.uuid4()),
    )
    await client.workflow_service.update_schedule(request, retry=True)


async def _update(
    client: Client,
    defn: ScheduleDefinition,
    schedule: Schedule,
    *,
    task_queue: str,
    expected_listed: str | None = None,
) -> ScheduleDescription:
    """Update until Temporal holds our definition, each attempt against a fresh description;
    returns the description that shows it held (the apply's record reads Temporal's time and
    next fire from it, with no describe of its own)."""
    handle = client.get_schedule_handle(defn.id)
    decide = _updater(
        client, defn, schedule, task_queue=task_queue, expected_listed=expected_listed
    )
    digest = definition_digest(defn, task_queue=task_queue)
    for _ in range(UPDATE_ATTEMPTS):
        desc = await handle.describe()
        update = await decide(ScheduleUpdateInput(description=desc))
        if update is None:
            return desc
        try:
            await send_update(client, desc, update.schedule)
        except RPCError as exc:
            # Newer servers (the CHASM scheduler) refuse a stale token outright with
            # FAILED_PRECONDITION ("mismatched conflict token"); older ones drop the update
            # silently, which the digest check below catches. Try again on a fresh description.
            if exc.status != RPCStatusCode.FAILED_PRECONDITION:
                raise
            continue
        written = await handle.describe()
        if (await action_memo(client, written)).get(DIGEST_MEMO) == digest:
            return written
    raise ScheduleBusy(
        f"schedule '{defn.id}' kept changing while apply updated it ({UPDATE_ATTEMPTS} "
        "attempts); nothing of it was overwritten: run apply again"
    )


def file_digest(definitions: list[ScheduleDefinition], *, task_queue: str) -> str:
    """The digest of a schedule file as applied: over its definitions' digests (which include
    the task queue and the mapping version), in no order. A comment, a reordering or another
    spelling of the same durations is the same file, and so is a zoned file applied in another
    year (its schedules' digests name the compiled years, the file's does not: an old release
    re-run in January is still refused as superseded)."""
    digests = sorted(
        definition_digest(d, task_queue=task_queue, compiled=False) for d in definitions
    )
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()


async def apply_definitions(
    client: Client,
    pool: asyncpg.Pool | None,
    definitions: list[ScheduleDefinition],
    *,
    task_queue: str,
    dry_run: bool = False,
    prune: bool = False,
    verify: bool = False,
    release: bool = False,
    force: bool = False,
) -> list[Change]:
    """Make Temporal hold `definitions`.

    `release`: `definitions` are a whole schedule file of the task queue, applied as a release
    (`schedules apply`): applies of one task queue run one at a time, a file superseded by a
    later one is refused unless `force`, and the file is recorded as the one in force once every
    schedule of it is. Without it (the dev stack, a test applying a schedule or two), nothing
    is refused or recorded of the file. `verify` describes every schedule, where a re-apply
    otherwise trusts the list for those it shows unchanged (`_unchanged_by_list`)."""
    whole_file = release and pool is not None and not dry_run
    async with _in_force(
        pool if whole_file else None, definitions, task_queue=task_queue, force=force
    ):
        digests = {d.id: definition_digest(d, task_queue=task_queue) for d in definitions}
        # One read of the list (a few pages for ten thousand schedules), and meanwhile what the
        # last applies recorded: together they settle the schedules the list shows unchanged.
        # The list also names the ones outside the file for --prune and the duplicate guard.
        listing, records = await asyncio.gather(
            schedule_list.read_listing(client), _records(pool, list(digests))
        )
        settled, expected = unchanged_by_list(digests, listing, records)
        if verify:
            settled = {}
        # The rest described concurrently (bounded): one by one, a file of a thousand
        # schedules spent seconds on round trips.
        unsettled = [defn for defn in definitions if defn.id not in settled]
        plans = dict(
            zip(
                [defn.id for defn in unsettled],
                await map_bounded(
                    lambda defn: plan_one(
                        client, defn, task_queue=task_queue, expected_listed=expected.get(defn.id)
                    ),
                    unsettled,
                    limit=DESCRIBE_CONCURRENCY,
                ),
                strict=True,
            )
        )
        planned: list[tuple[ScheduleDefinition, Change, ScheduleDescription | None]] = [
            (defn, Change(defn.id, UNCHANGED, next_fire=settled[defn.id]), None)
            if defn.id in settled
            else (defn, *plans[defn.id])
            for defn in definitions
        ]
        # A schedule the list shows with a fire ahead has one left, so it is not finished:
        # judging each spec again cost an unchanged re-apply more than its whole list read.
        _mark_finished(
            [p for p in planned if p[0].id not in settled or settled[p[0].id] is None],
            now=datetime.now(UTC),
        )
        # New schedules, and updates that change what runs when: either may now duplicate a
        # schedule already in Temporal. (An update of other fields keeps what it was.)
        guarded = [
            defn
            for defn, change, _ in planned
            if change.action == CREATED
            or (change.action == UPDATED and set(change.changed_fields) & _DUPLICATE_FIELDS)
        ]
        others: list[ScheduleView] = []
        if prune or guarded:
            others = await _managed_outside_file(
                client, definitions, list(listing), task_queue=task_queue
            )
        if guarded and not prune:
            # With --prune every other managed schedule of this task queue is about to go, so
            # none of them can be duplicated.
            existing = {v.schedule_id: v.definition for v in others if v.definition is not None}
            problems = duplicates_of_existing(guarded, existing)
            if problems:
                raise DuplicateSchedules("nothing applied: " + "; ".join(problems))
        pruned = [Change(v.schedule_id, DELETED) for v in others] if prune else []
        if dry_run:
            await _preview(client, planned, task_queue=task_queue)
            return [change for _, change, _ in planned] + pruned
        # An unchanged schedule needs no write and no second look: what we described (or the list
        # showed) is current.
        unchanged = [(d, c, desc) for d, c, desc in planned if c.action == UNCHANGED]
        described = [(d, desc) for d, _, desc in unchanged if desc is not None]
        for _, change, desc in unchanged:
            if desc is not None:
                next_times = desc.info.next_action_times
                change.next_fire = next_times[0] if next_times else None
        if pool is not None and unchanged:
            # Rows a schedule found unchanged lacks are created: its heartbeat row only if missing
            # (the last success and the deadline a row holds stay), its definition only if it is
            # not already the latest recorded (a schedule applied before its database was set up,
            # or an apply stopped between a write and its rows). This runs before any write to
            # Temporal below, so a write that then fails leaves these rows in place: harmless, they
            # describe schedules that exist unchanged, and a rerun inserts nothing.
            async with pool.acquire() as conn, conn.transaction():
                await heartbeats.expect_all_if_missing(
                    conn,
                    [
                        (
                            d.id,
                            c.next_fire,
                            d.heartbeat_grace,
                            digests[d.id],
                            horizon(d, task_queue=task_queue),
                        )
                        for d, c, _ in unchanged
                    ],
                )
                await definition_history.record_if_not_latest(
                    conn,
                    [
                        (
                            d.id,
                            desc.info.last_updated_at or desc.info.created_at,
                            digests[d.id],
                            definition_json(d, task_queue=task_queue),
                        )
                        for d, desc in described
                    ],
                )
                # With the history row above: the next apply finds these in the list alone.
                await applied.record_schedules(
                    conn,
                    [(d.id, digests[d.id], described_listed_digest(desc)) for d, desc in described],
                )
        for _, change, _ in unchanged:
            _log_change(change)
        for _, change, _ in planned:
            if change.action == FINISHED:
                _log_change(change)
        writing = [
            (defn, change) for defn, change, _ in planned if change.action in (CREATED, UPDATED)
        ]
        writes_from = None
        if pool is not None and any(change.action == CREATED for _, change in writing):
            # Postgres' clock before any create: a pause row (stamped by Postgres) older than it was
            # recorded for an earlier schedule of the id. Neither this host's clock (it may run
            # ahead) nor Temporal's create time (stamped when the scheduler first runs, which can
            # be after the create returned and a pause was recorded) can bound that.
            async with pool.acquire() as conn:
                writes_from = await conn.fetchval("SELECT clock_timestamp()")
        outcomes = await try_bounded(
            lambda pair: _write(
                client,
                pool,
                pair[0],
                pair[1],
                task_queue=task_queue,
                writes_from=writes_from,
                expected_listed=expected.get(pair[0].id),
            ),
            writing,
            limit=WRITE_CONCURRENCY,
        )
        # Each create recorded its rows right after it; their first fires are filled in together
        # (from the schedule list), even when another write failed.
        created = [o.value for o in outcomes if o.value is not None and o.value.first_fire_pending]
        unfilled = await _fill_first_fires(client, pool, created, task_queue=task_queue)
        if any(o.error is not None for o in outcomes) or unfilled is not None:
            # Nothing is pruned after a failed write: the file is not in force yet.
            raise ApplyIncomplete.of(writing, outcomes, unfilled)
        written = {o.value.change.schedule_id: o.value.change for o in outcomes if o.value}
        changes = [written.get(change.schedule_id, change) for _, change, _ in planned]
        for change in pruned:
            await _prune(client, pool, change.schedule_id)
            changes.append(change)
        return changes


@contextlib.asynccontextmanager
async def _in_force(
    pool: asyncpg.Pool | None,
    definitions: list[ScheduleDefinition],
    *,
    task_queue: str,
    force: bool,
) -> AsyncIterator[None]:
    """Around an apply of a whole file (`pool` None: not one): waits for any other apply of
    the task queue, refuses a superseded file unless `force`, and records the file as the one
    in force once the apply returned (a failed write raised, and records nothing: a rerun of
    an incomplete apply is not refused as an older file)."""
    if pool is None:
        yield
        return
    digest = file_digest(definitions, task_queue=task_queue)
    async with pool.acquire() as guard:
        await applied.lock(guard, task_queue)
        try:
            # Judged under the lock: an apply that waited for another reads what it recorded.
            standing = await applied.standing(guard, task_queue, digest)
            if standing.superseded and not force:
                raise SupersededFile(_superseded_message(standing))
            yield
            if not standing.is_latest:
                await applied.record_file(
                    guard,
                    task_queue=task_queue,
                    file_digest=digest,
                    schedules=len(definitions),
                    forced=force and standing.superseded,
                )
        finally:
            await applied.unlock(guard, task_queue)


def _superseded_message(standing: applied.Standing) -> str:
    assert standing.applied_at is not None and standing.latest_applied_at is not None
    return (
        f"this file was applied at {utc_text(standing.applied_at)} and another file has been "
        f"applied since (at {utc_text(standing.latest_applied_at)}), so nothing was applied: "
        "apply the newer file, or pass --force to put this one back in force (a rollback)"
    )


def _mark_finished(
    planned: list[tuple[ScheduleDefinition, Change, ScheduleDescription | None]],
    *,
    now: datetime,
) -> None:
    """Note each entry whose end_at has passed; one Temporal does not hold is not created.

    Such an entry passed validation because it could fire in its life (one that never could is
    refused with the file). Temporal still holds it while it is recent: it is kept, and an edit
    of it is written like any other, so an end_at moved into the past does stop the schedule.
    Once a schedule has no fire left, Temporal deletes it on its own, at a time of its choosing:
    creating it again would bring back, on each apply (each worker pod's start), a schedule with
    nothing to run, for Temporal to delete again. So it is reported finished, not created.
    """
    for defn, change, _ in planned:
        change.finished = defn.finished(now)
        if change.finished is not None and change.action == CREATED:
            change.action = FINISHED


@dataclass
class _Written:
    """One schedule written to Temporal by this apply."""

    defn: ScheduleDefinition
    change: Change
    first_fire_pending: bool = False
    """A create: its rows are recorded, its first fire is still to fill in."""


async def _fill_first_fires(
    client: Client,
    pool: asyncpg.Pool | None,
    created: list[_Written],
    *,
    task_queue: str,
) -> BaseException | None:
    """Read Temporal's first fire of each schedule just created and set it as its heartbeat
    deadline (`heartbeats.fill_first_fires`); the error if that failed (the rows stay without
    a deadline: a rerun, finding the schedules unchanged, fills it in)."""
    if not created:
        return None
    error: BaseException | None = None
    try:
        fires = await first_fires(client, [w.defn.id for w in created])
        for w in created:
            w.change.next_fire = fires.get(w.defn.id)
        if pool is not None:
            async with pool.acquire() as conn:
                await heartbeats.fill_first_fires(
                    conn,
                    [
                        (
                            w.defn.id,
                            w.change.next_fire,
                            definition_digest(w.defn, task_queue=task_queue),
                        )
                        for w in created
                    ],
                )
    except Exception as exc:
        error = exc
    for w in created:
        _log_change(w.change)
    return error


async def first_fires(client: Client, schedule_ids: list[str]) -> dict[str, datetime | None]:
    """Temporal's next fire of each schedule just created.

    A describe after each create cost the server a query on every new scheduler workflow,
    about as much again as the creates themselves; the schedule list (a few paged reads)
    carries the same next fire times. The list is eventually consistent, and an entry may
    show no fire until its scheduler ran once: it is read again until it shows them all, for
    at most LIST_WAIT; the schedules it still lacks then (or a server without advanced
    visibility) are described. A few creates are described at once: no wait for the list.
    """
    found: dict[str, datetime | None] = {}
    wanted = set(schedule_ids)
    if len(wanted) > DESCRIBE_AT_MOST:
        deadline = time.monotonic() + LIST_WAIT
        while True:
            async for listed in await client.list_schedules():
                if listed.id in wanted and listed.info and listed.info.next_action_times:
                    found[listed.id] = listed.info.next_action_times[0]
            if len(found) == len(wanted) or time.monotonic() > deadline:
                break
            await asyncio.sleep(LIST_POLL)
    missing = sorted(wanted - set(found))
    for sid, desc in zip(missing, await describe_many(client, missing), strict=True):
        times = desc.info.next_action_times if desc is not None else []
        found[sid] = times[0] if times else None
    return found


class ApplyIncomplete(CronwardenError):
    """A write failed midway. Names exactly which schedules were written (and recorded), which
    were written to Temporal without their database rows, which failed and which were never
    tried; the same apply again converges (the written ones come back unchanged, and get the
    rows they miss)."""

    def __init__(
        self,
        *,
        created: list[str],
        updated: list[str],
        unrecorded: list[tuple[str, BaseException]],
        failed: list[tuple[str, BaseException]],
        not_applied: list[str],
        unfilled: BaseException | None = None,
    ) -> None:
        self.created = created
        self.updated = updated
        self.unrecorded = [sid for sid, _ in unrecorded]
        self.failed = [sid for sid, _ in failed]
        self.not_applied = not_applied
        lines = ["apply stopped at an error; run the same command again to finish it:"]
        if created:
            lines.append(f"  created ({len(created)}): {', '.join(created)}")
        if updated:
            lines.append(f"  updated ({len(updated)}): {', '.join(updated)}")
        for sid, exc in unrecorded:
            lines.append(
                f"  written to Temporal, heartbeat and definition rows not recorded: {sid} "
                f"({_error_text(exc)})"
            )
        if unfilled is not None and created:
            lines.append(
                "  created, first fire not yet expected by the monitor: "
                f"{', '.join(created)} ({_error_text(unfilled)})"
            )
        for sid, exc in failed:
            # A time-out or a lost connection may come after the server applied the write.
            verdict = "failed (may have been written)" if _maybe_written(exc) else "failed"
            lines.append(f"  {verdict}: {sid} ({_error_text(exc)})")
        if not_applied:
            lines.append(
                f"  not applied, nothing written ({len(not_applied)}): {', '.join(not_applied)}"
            )
        super().__init__("\n".join(lines))

    @classmethod
    def of(
        cls,
        writing: list[tuple[ScheduleDefinition, Change]],
        outcomes: list[Outcome[_Written]],
        unfilled: BaseException | None = None,
    ) -> ApplyIncomplete:
        created: list[str] = []
        updated: list[str] = []
        unrecorded: list[tuple[str, BaseException]] = []
        failed: list[tuple[str, BaseException]] = []
        not_applied: list[str] = []
        for (defn, _), outcome in zip(writing, outcomes, strict=True):
            if not outcome.started:
                not_applied.append(defn.id)
            elif isinstance(outcome.error, _NotRecorded):
                unrecorded.append((defn.id, outcome.error.cause))
            elif outcome.error is not None:
                failed.append((defn.id, outcome.error))
            elif outcome.value is not None:
                (created if outcome.value.change.action == CREATED else updated).append(defn.id)
        return cls(
            created=created,
            updated=updated,
            unrecorded=unrecorded,
            failed=failed,
            not_applied=not_applied,
            unfilled=unfilled,
        )


class _NotRecorded(Exception):
    """The schedule is written to Temporal; what failed came after (its rows, its describe)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


# Errors that do not say the server refused the request: it may have applied it before the
# answer was lost.
_UNCERTAIN = {
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.CANCELLED,
    RPCStatusCode.UNKNOWN,
    RPCStatusCode.INTERNAL,
}


def _maybe_written(exc: BaseException) -> bool:
    if isinstance(exc, RPCError):
        return exc.status in _UNCERTAIN
    return isinstance(exc, (TimeoutError, ConnectionError, asyncio.CancelledError))


def _error_text(exc: BaseException) -> str:
    # The wordings `run_command` gives these errors when they end a command on their own.
    if isinstance(exc, asyncpg.UndefinedTableError):
        return f"{exc}: the database is not migrated; run `cronwarden migrate`"
    if isinstance(exc, RPCError):
        return f"Temporal refused the request ({exc.status.name}): {exc.message}"
    return f"{type(exc).__name__}: {exc}"


async def _write(
    client: Client,
    pool: asyncpg.Pool | None,
    defn: ScheduleDefinition,
    change: Change,
    *,
    task_queue: str,
    writes_from: datetime | None,
    expected_listed: str | None = None,
) -> _Written:
    """Create or update one schedule and record its rows right after its write: a run of it,
    a concurrent apply or a pause must find them from then on. A create's first fire is filled
    in later, with the others' (`_fill_first_fires`)."""
    schedule = to_temporal(defn, task_queue=task_queue)
    if change.action == CREATED:
        try:
            handle = await client.create_schedule(
                defn.id, schedule, memo={MANAGED_MEMO: {"managed": True}}
            )
        except ScheduleAlreadyRunningError:
            # Created by a concurrent apply since we looked: fall back to an update.
            change = Change(defn.id, UPDATED, ["(created concurrently)"])
        else:
            try:
                if pool is not None:
                    # Temporal's own time of the create, as an update's row carries Temporal's
                    # time of the update: stamped from this host's clock, a clock running ahead
                    # would put the create after a later update, and the newest row (what
                    # `status` shows, what a window's end is judged by) would be a definition
                    # Temporal no longer holds. No fire of the schedule comes before its create,
                    # so the history judges every fire by this definition.
                    created = await handle.describe()
                    await _record(
                        pool,
                        defn,
                        change,
                        created.info.created_at,
                        task_queue=task_queue,
                        listed=described_listed_digest(created),
                        pauses_before=writes_from,
                    )
            except Exception as exc:
                raise _NotRecorded(exc) from exc
            return _Written(defn, change, first_fire_pending=True)
    written = await _update(
        client, defn, schedule, task_queue=task_queue, expected_listed=expected_listed
    )
    try:
        next_times = written.info.next_action_times
        change.next_fire = next_times[0] if next_times else None
        if pool is not None:
            # Temporal's own time for the write: backfill and audit judge fires up to this
            # second by the previous definition, later ones by this one.
            applied_at = written.info.last_updated_at or written.info.created_at
            await _record(
                pool,
                defn,
                change,
                applied_at,
                task_queue=task_queue,
                listed=described_listed_digest(written),
            )
    except Exception as exc:
        raise _NotRecorded(exc) from exc
    _log_change(change)
    return _Written(defn, change)


async def _record(
    pool: asyncpg.Pool,
    defn: ScheduleDefinition,
    change: Change,
    applied_at: datetime,
    *,
    task_queue: str,
    listed: str,
    pauses_before: datetime | None = None,
) -> None:
    """The definition history and heartbeat rows of one written schedule, in one transaction.
    `applied_at` is Temporal's time of the write (the schedule's create or last update time),
    never this host's clock. `pauses_before`, for a create: Postgres' clock before this apply's
    creates (a pause recorded earlier belonged to an earlier schedule of the id)."""
    async with pool.acquire() as conn, conn.transaction():
        if change.action == CREATED and pauses_before is not None:
            # Temporal creates it unpaused: a pause recorded for an earlier schedule of this
            # id (deleted outside cronwarden) must not keep the monitor silent. Before the
            # heartbeat write below, which moves the row's updated_at.
            await heartbeats.forget_pause(conn, defn.id, recorded_before=pauses_before)
        if change.replaced is not None:
            # What this update replaces, from the memo, unless history already ends with it: a
            # schedule applied before definitions were recorded (held since creation, as far as
            # anyone can tell), or a write whose own row was lost. Without it, the part of a
            # window before this update would be judged by the new spec, or by the one before.
            created_at, written_at, old_digest, old_definition = change.replaced
            await definition_history.record_replaced(
                conn,
                schedule_id=defn.id,
                created_at=created_at,
                last_written_at=written_at,
                definition_digest=old_digest,
                definition=old_definition,
            )
        await definition_history.record(
            conn,
            schedule_id=defn.id,
            applied_at=applied_at,
            definition_digest=definition_digest(defn, task_queue=task_queue),
            definition=definition_json(defn, task_queue=task_queue),
        )
        await heartbeats.expect(
            conn,
            schedule_id=defn.id,
            next_expected_at=change.next_fire,
            grace=defn.heartbeat_grace,
            definition_digest=definition_digest(defn, task_queue=task_queue),
            compiled_until=horizon(defn, task_queue=task_queue),
        )
        await applied.record_schedules(
            conn, [(defn.id, definition_digest(defn, task_queue=task_queue), listed)]
        )


def horizon(defn: ScheduleDefinition, *, task_queue: str) -> datetime | None:
    """Where the local-time entries this apply compiles end: Temporal has no fire of the
    schedule after it, so the monitor pages ahead of it (`heartbeats.compiled_until`). None for
    a UTC schedule, for one that ends before it, and for one whose cron fires nothing from a
    day before it on."""
    until = compiled_until(definition_json(defn, task_queue=task_queue).get(ZONE_COMPILED))
    if until is None:
        return None
    # end_at is an instant: it ends the fires before the horizon or it does not. Temporal may
    # still fire at end_at itself, which the entries do not reach when it is the horizon.
    if defn.end_at is not None and defn.end_at < until:
        return None
    # The cron's wall times are judged as UTC here: a day's margin, as no zone is a day away.
    if defn.finished(until - timedelta(days=1)) is not None:
        return None
    return until


async def _preview(
    client: Client,
    planned: list[tuple[ScheduleDefinition, Change, ScheduleDescription | None]],
    *,
    task_queue: str,
) -> None:
    """Fill in what the new spec means, in Temporal's own words, before anything changes."""
    now = datetime.now(UTC)
    changing = [(d, c) for d, c, _ in planned if c.action in (CREATED, UPDATED)]
    previews = await map_bounded(
        lambda pair: next_fire_times(client, pair[0], task_queue=task_queue, now=now),
        changing,
        limit=DESCRIBE_CONCURRENCY,
    )
    for (_, change), times in zip(changing, previews, strict=True):
        change.next_fires = times
        change.next_fire = times[0] if times else None


def _log_change(change: Change) -> None:
    extra = {} if change.finished is None else {"finished": change.finished}
    log.info(
        f"schedule.{change.action}",
        schedule_id=change.schedule_id,
        changed_fields=change.changed_fields,
        next_fire=utc_text_or_none(change.next_fire),
        **extra,
    )


@dataclass(frozen=True)
class _Records:
    """What the last applies recorded of the file's schedules."""

    applied: dict[str, tuple[str, str]]
    """Schedule id -> (definition digest, listed digest) at its last apply."""
    latest: dict[str, str]
    """Schedule id -> the digest of its latest definition history entry."""


async def _records(pool: asyncpg.Pool | None, schedule_ids: list[str]) -> _Records:
    if pool is None:
        return _Records({}, {})
    async with pool.acquire() as conn:
        return _Records(
            await applied.recorded_schedules(conn, schedule_ids),
            await definition_history.latest_digests(conn, schedule_ids),
        )


def unchanged_by_list(
    digests: dict[str, str], listing: dict[str, Listed], records: _Records
) -> tuple[dict[str, datetime | None], dict[str, str]]:
    """The schedules of the file (id -> its definition digest) that need no describe, with
    their next fire from the list; and for each schedule whose last apply recorded the file's
    definition, the listed digest it recorded (a describe showing another spec finds an edit
    made outside cronwarden).

    One is unchanged when all of these hold:
    - the list shows it, carrying cronwarden's managed marker;
    - its spec and workflow type, as the list shows them, are the ones a describe showed at
      its last apply (`cronwarden.applied_schedules`): an edit of its spec made outside
      cronwarden (the UI, the CLI, an SDK), memo kept or not, is seen here;
    - that apply recorded the file's definition digest, and it is still the latest definition
      the history records (a delete through cronwarden records one that is not).
    Everything else is described. What the list cannot show is an edit outside cronwarden of
    only the action (args, task queue, timeouts) or the policies: `--verify` finds those. The
    list is eventually consistent, so an edit or a delete a moment before the apply may be
    found by the next one.
    """
    settled: dict[str, datetime | None] = {}
    expected: dict[str, str] = {}
    for schedule_id, digest in digests.items():
        record = records.applied.get(schedule_id)
        if record is None or record[0] != digest:
            continue
        expected[schedule_id] = record[1]
        listed = listing.get(schedule_id)
        if listed is None or listed.managed is not True:
            continue
        if listed.listed_digest == record[1] and records.latest.get(schedule_id) == digest:
            settled[schedule_id] = listed.next_fire
    return settled, expected


async def _managed_outside_file(
    client: Client,
    definitions: list[ScheduleDefinition],
    listed_ids: list[str],
    *,
    task_queue: str,
) -> list[ScheduleView]:
    """Managed schedules of this task queue that the file does not list.

    Scoped to the task queue: one namespace may host several cronwarden deployments, and one
    deployment's file must neither prune nor be refused by the other's schedules. Temporal's
    schedule list is eventually consistent, so a schedule created a moment ago may be missed
    (a later apply sees it).
    """
    in_file = {defn.id for defn in definitions}
    # Only the schedules outside the file are described: re-applying a file of thousands with
    # one new schedule must not describe the thousands again.
    outside = [sid for sid in sorted(listed_ids) if sid not in in_file]
    views = [await view(client, d) for d in await describe_many(client, outside) if d is not None]
    return [v for v in views if v.managed and v.task_queue == task_queue]


async def _prune(client: Client, pool: asyncpg.Pool | None, schedule_id: str) -> None:
    desc = await describe_or_none(client, schedule_id)
    # Looked at again right before deleting: never delete what we did not create.
    if desc is not None and not await is_managed(desc):
        return
    if desc is not None:
        await delete_schedule(client, pool, schedule_id)
    if pool is not None:
        async with pool.acquire() as conn:
            # A pruned schedule must not leave a heartbeat the monitor pages on for ever.
            await heartbeats.delete(conn, schedule_id)
    log.info("schedule.deleted", schedule_id=schedule_id, by="apply --prune")
