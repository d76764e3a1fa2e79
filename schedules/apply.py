"""`schedules apply`: create-or-update each schedule of a file, idempotently.

Validation happened before we get here (a file with any bad entry never reaches Temporal).
A second apply of the same file makes no write to Temporal: the definition digest stored in the
schedule's action memo is compared first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.service import RPCError, RPCStatusCode

from cronwarden.errors import CronwardenError
from cronwarden.logs import get_logger
from schedules.mapping import (
    DEFINITION_MEMO,
    DIGEST_MEMO,
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


@dataclass
class Change:
    schedule_id: str
    action: str
    changed_fields: list[str] = field(default_factory=list)
    next_fire: datetime | None = None


class NotManaged(CronwardenError):
    """A schedule with this id exists but cronwarden did not create it."""


async def describe_or_none(client: Client, schedule_id: str) -> ScheduleDescription | None:
    try:
        return await client.get_schedule_handle(schedule_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


async def is_managed(desc: ScheduleDescription) -> bool:
    memo = await desc.memo()
    value = memo.get(MANAGED_MEMO)
    return isinstance(value, dict) and value.get("managed") is True


async def _action_memo(client: Client, desc: ScheduleDescription) -> dict[str, Any]:
    action = desc.schedule.action
    if not isinstance(action, ScheduleActionStartWorkflow) or not action.memo:
        return {}
    decoded: dict[str, Any] = {}
    for key, payload in action.memo.items():
        # Described schedules carry raw payloads; decode ours (through the payload codec, if
        # one is configured), ignore what we cannot read.
        try:
            decoded[key] = (await client.data_converter.decode([payload]))[0]
        except Exception:  # a foreign memo value is not our concern
            continue
    return decoded


def _changed_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    keys = sorted(set(old) | set(new))
    return [k for k in keys if old.get(k) != new.get(k)]


async def plan_one(
    client: Client, defn: ScheduleDefinition, *, task_queue: str
) -> tuple[Change, ScheduleDescription | None]:
    desc = await describe_or_none(client, defn.id)
    if desc is None:
        return Change(defn.id, CREATED), None
    if not await is_managed(desc):
        raise NotManaged(
            f"schedule '{defn.id}' exists in Temporal but was not created by cronwarden; "
            "it is left alone: delete it yourself or give this schedule another id"
        )
    memo = await _action_memo(client, desc)
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
        if not await is_managed(current):
            raise NotManaged(
                f"schedule '{defn.id}' exists in Temporal but was not created by cronwarden; "
                "it is left alone"
            )
        if (await _action_memo(client, current)).get(DIGEST_MEMO) == digest:
            return None
        # Keep the live state: re-applying a file must not undo an operator's pause.
        schedule.state = current.schedule.state
        return ScheduleUpdate(schedule=schedule)

    return update


async def apply_definitions(
    client: Client,
    pool: asyncpg.Pool | None,
    definitions: list[ScheduleDefinition],
    *,
    task_queue: str,
    dry_run: bool = False,
) -> list[Change]:
    planned = [(defn, *await plan_one(client, defn, task_queue=task_queue)) for defn in definitions]
    if dry_run:
        return [change for _, change, _ in planned]
    changes: list[Change] = []
    for defn, change, planned_desc in planned:
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
            await handle.update(_updater(client, defn, schedule, task_queue=task_queue))
        # An unchanged schedule needs no second look: what we described is current.
        desc = (
            planned_desc if change.action == UNCHANGED and planned_desc else await handle.describe()
        )
        next_times = desc.info.next_action_times
        change.next_fire = next_times[0] if next_times else None
        if pool is not None:
            async with pool.acquire() as conn:
                if change.action == UNCHANGED:
                    await heartbeats.expect_if_missing(
                        conn,
                        schedule_id=defn.id,
                        next_expected_at=change.next_fire,
                        grace=defn.heartbeat_grace,
                    )
                else:
                    await heartbeats.expect(
                        conn,
                        schedule_id=defn.id,
                        next_expected_at=change.next_fire,
                        grace=defn.heartbeat_grace,
                    )
        log.info(
            f"schedule.{change.action}",
            schedule_id=defn.id,
            changed_fields=change.changed_fields,
            next_fire=change.next_fire.isoformat() if change.next_fire else None,
        )
        changes.append(change)
    return changes
