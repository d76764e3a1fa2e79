"""`schedules apply`: create-or-update each schedule of a file, idempotently.

Validation happened before we get here (a file with any bad entry never reaches Temporal).
A second apply of the same file makes no write to Temporal: the definition digest stored in the
schedule's action memo is compared first.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
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

from activities.contract import DIGEST_MEMO
from cronwarden.errors import CronwardenError, InvalidInput
from cronwarden.logs import get_logger
from schedules.bounded import map_bounded
from schedules.duplicates import duplicates_of_existing
from schedules.inventory import (
    DESCRIBE_CONCURRENCY,
    NotManaged,
    ScheduleView,
    action_memo,
    all_views,
    describe_or_none,
    is_managed,
    is_managed_or_refuse,
)
from schedules.mapping import (
    DEFINITION_MEMO,
    MANAGED_MEMO,
    definition_digest,
    definition_json,
    to_temporal,
)
from schedules.model import ScheduleDefinition
from store import heartbeats

log = get_logger("cronwarden.schedules")

CREATED = "created"
UPDATED = "updated"
UNCHANGED = "unchanged"
DELETED = "deleted"

__all__ = ["NotManaged", "apply_definitions", "describe_or_none", "is_managed"]


# The fields the duplicate guard compares (schedules/duplicates.py).
_DUPLICATE_FIELDS = {"job", "cron", "every", "args"}
# Each attempt re-reads the schedule; a schedule still changing after this many is reported.
UPDATE_ATTEMPTS = 5


class ScheduleBusy(CronwardenError):
    """Every update attempt met a concurrent change of the schedule."""


class DuplicateSchedules(InvalidInput):
    """New schedules that would run the same job on the same trigger with the same args as
    schedules already in Temporal."""


@dataclass
class Change:
    schedule_id: str
    action: str
    changed_fields: list[str] = field(default_factory=list)
    next_fire: datetime | None = None


def _changed_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    keys = sorted(set(old) | set(new))
    return [k for k in keys if old.get(k) != new.get(k)]


async def plan_one(
    client: Client, defn: ScheduleDefinition, *, task_queue: str
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
        return Change(defn.id, UNCHANGED), desc
    old = memo.get(DEFINITION_MEMO)
    fields = _changed_fields(
        old if isinstance(old, dict) else {}, definition_json(defn, task_queue=task_queue)
    )
    return Change(defn.id, UPDATED, fields), desc


def _updater(
    client: Client, defn: ScheduleDefinition, schedule: Schedule, *, task_queue: str
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
        if (await action_memo(client, current)).get(DIGEST_MEMO) == digest:
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
    client: Client, defn: ScheduleDefinition, schedule: Schedule, *, task_queue: str
) -> None:
    """Update until Temporal holds our definition, each attempt against a fresh description."""
    handle = client.get_schedule_handle(defn.id)
    decide = _updater(client, defn, schedule, task_queue=task_queue)
    digest = definition_digest(defn, task_queue=task_queue)
    for _ in range(UPDATE_ATTEMPTS):
        desc = await handle.describe()
        update = await decide(ScheduleUpdateInput(description=desc))
        if update is None:
            return
        try:
            await send_update(client, desc, update.schedule)
        except RPCError as exc:
            # Newer servers (the CHASM scheduler) refuse a stale token outright with
            # FAILED_PRECONDITION ("mismatched conflict token"); older ones drop the update
            # silently, which the digest check below catches. Try again on a fresh description.
            if exc.status != RPCStatusCode.FAILED_PRECONDITION:
                raise
            continue
        if (await action_memo(client, await handle.describe())).get(DIGEST_MEMO) == digest:
            return
    raise ScheduleBusy(
        f"schedule '{defn.id}' kept changing while apply updated it ({UPDATE_ATTEMPTS} "
        "attempts); nothing of it was overwritten: run apply again"
    )


async def apply_definitions(
    client: Client,
    pool: asyncpg.Pool | None,
    definitions: list[ScheduleDefinition],
    *,
    task_queue: str,
    dry_run: bool = False,
    prune: bool = False,
) -> list[Change]:
    # Described concurrently (bounded): one by one, a file of a thousand schedules spent
    # seconds on round trips even when nothing had changed.
    plans = await map_bounded(
        lambda defn: plan_one(client, defn, task_queue=task_queue),
        definitions,
        limit=DESCRIBE_CONCURRENCY,
    )
    planned = [(defn, *plan) for defn, plan in zip(definitions, plans, strict=True)]
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
        others = await _managed_outside_file(client, definitions, task_queue=task_queue)
    if guarded and not prune:
        # With --prune every other managed schedule of this task queue is about to go, so
        # none of them can be duplicated.
        existing = {v.schedule_id: v.definition for v in others if v.definition is not None}
        problems = duplicates_of_existing(guarded, existing)
        if problems:
            raise DuplicateSchedules("nothing applied: " + "; ".join(problems))
    pruned = [Change(v.schedule_id, DELETED) for v in others] if prune else []
    if dry_run:
        return [change for _, change, _ in planned] + pruned
    # An unchanged schedule needs no write and no second look: what we described is current.
    unchanged = [
        (d, c, desc) for d, c, desc in planned if c.action == UNCHANGED and desc is not None
    ]
    for _, change, desc in unchanged:
        next_times = desc.info.next_action_times
        change.next_fire = next_times[0] if next_times else None
    if pool is not None and unchanged:
        # Its heartbeat row is only created if missing (a schedule applied before its database
        # was set up): the last success and the deadline a row holds stay. This runs before
        # any write to Temporal below, so a write that then fails leaves these rows in place:
        # harmless, they describe schedules that exist unchanged, and a rerun inserts nothing.
        async with pool.acquire() as conn:
            await heartbeats.expect_all_if_missing(
                conn,
                [
                    (
                        d.id,
                        c.next_fire,
                        d.heartbeat_grace,
                        definition_digest(d, task_queue=task_queue),
                    )
                    for d, c, _ in unchanged
                ],
            )
    changes: list[Change] = []
    for defn, change, _ in planned:
        if change.action == UNCHANGED:
            _log_change(change)
            changes.append(change)
            continue
        schedule = to_temporal(defn, task_queue=task_queue)
        handle = client.get_schedule_handle(defn.id)
        if change.action == CREATED:
            try:
                await client.create_schedule(
                    defn.id, schedule, memo={MANAGED_MEMO: {"managed": True}}
                )
            except ScheduleAlreadyRunningError:
                # Created by a concurrent apply since we looked: fall back to an update.
                change = Change(defn.id, UPDATED, ["(created concurrently)"])
        if change.action == UPDATED:
            await _update(client, defn, schedule, task_queue=task_queue)
        next_times = (await handle.describe()).info.next_action_times
        change.next_fire = next_times[0] if next_times else None
        if pool is not None:
            async with pool.acquire() as conn, conn.transaction():
                await heartbeats.expect(
                    conn,
                    schedule_id=defn.id,
                    next_expected_at=change.next_fire,
                    grace=defn.heartbeat_grace,
                    definition_digest=definition_digest(defn, task_queue=task_queue),
                )
                if change.action == CREATED:
                    # Temporal creates it unpaused: a pause recorded for an earlier schedule of
                    # this id (deleted outside cronwarden) must not keep the monitor silent.
                    await heartbeats.forget_pause(conn, defn.id)
        _log_change(change)
        changes.append(change)
    for change in pruned:
        await _prune(client, pool, change.schedule_id)
        changes.append(change)
    return changes


def _log_change(change: Change) -> None:
    log.info(
        f"schedule.{change.action}",
        schedule_id=change.schedule_id,
        changed_fields=change.changed_fields,
        next_fire=change.next_fire.isoformat() if change.next_fire else None,
    )


async def _managed_outside_file(
    client: Client, definitions: list[ScheduleDefinition], *, task_queue: str
) -> list[ScheduleView]:
    """Managed schedules of this task queue that the file does not list.

    Scoped to the task queue: one namespace may host several cronwarden deployments, and one
    deployment's file must neither prune nor be refused by the other's schedules. Temporal's
    schedule list is eventually consistent, so a schedule created a moment ago may be missed
    (a later apply sees it).
    """
    in_file = {defn.id for defn in definitions}
    return [
        v
        for v in await all_views(client)
        if v.managed and v.schedule_id not in in_file and v.task_queue == task_queue
    ]


async def _prune(client: Client, pool: asyncpg.Pool | None, schedule_id: str) -> None:
    desc = await describe_or_none(client, schedule_id)
    # Looked at again right before deleting: never delete what we did not create.
    if desc is not None and not await is_managed(desc):
        return
    if desc is not None:
        await client.get_schedule_handle(schedule_id).delete()
    if pool is not None:
        async with pool.acquire() as conn:
            # A pruned schedule must not leave a heartbeat the monitor pages on for ever.
            await heartbeats.delete(conn, schedule_id)
    log.info("schedule.deleted", schedule_id=schedule_id, by="apply --prune")
