"""What `schedules list` and `schedules describe` read, in the JSON shape both print.

The CLI only renders: every read (Temporal's schedule list and descriptions, the definitions
`apply` recorded, the outbox and the heartbeat row) happens here, so a test or another front end
gets the same answer the command prints.
"""

from __future__ import annotations

from typing import Any

import asyncpg
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from cronwarden.activities.contract import RunOutcome, logical_key
from cronwarden.backfill.causes import causes_lines
from cronwarden.backfill.explain import recent_causes
from cronwarden.errors import CronwardenError
from cronwarden.schedules.inventory import ListedView, ScheduleView, get_view, listed_views
from cronwarden.schedules.local_times import (
    causes_for_text,
    causes_with_local,
    local_fields,
    local_or_none,
    zone_fields,
    zone_of_definition,
)
from cronwarden.schedules.status import lease_skip_json, replay_error_json
from cronwarden.store import definitions, heartbeats, outbox
from cronwarden.times import utc_text_or_none


async def listed(client: Client, pool: asyncpg.Pool) -> list[ScheduleView | ListedView]:
    """Every schedule of the namespace from Temporal's list, with the definitions `apply`
    recorded for the managed ones."""
    async with pool.acquire() as conn:
        recorded = await definitions.latest_all(conn)
    return await listed_views(client, recorded)


def view_json(v: ScheduleView | ListedView) -> dict[str, Any]:
    next_fire = v.next_fire_times[0] if v.next_fire_times else None
    return {
        "schedule_id": v.schedule_id,
        "managed": v.managed,
        "job": v.job,
        "spec": v.spec,
        "overlap": v.overlap,
        "paused": v.paused,
        "note": v.note,
        "next_fire": utc_text_or_none(next_fire),
        # A zoned schedule's zone and its next fire on that wall clock; nothing for UTC.
        **zone_fields(zone_of_definition(v.definition), next_fire=next_fire),
    }


async def run_outcome(
    client: Client, workflow_id: str, run_id: str, *, managed: bool
) -> tuple[str, str | None]:
    """Temporal's status of a run and, for a completed run of a managed schedule, the guard's
    in-band outcome (`ran`, `already-done`, `overlap-locked`)."""
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


async def described(client: Client, pool: asyncpg.Pool, schedule_id: str) -> dict[str, Any]:
    """`schedules describe --json`: the schedule's view, its recent runs with what the outbox
    says of their keys, and its heartbeat row."""
    return await describe_json(client, pool, await get_view(client, schedule_id))


async def describe_json(client: Client, pool: asyncpg.Pool, v: ScheduleView) -> dict[str, Any]:
    zone = zone_of_definition(v.definition)
    keys = {r.workflow_id: logical_key(v.schedule_id, r.scheduled_at) for r in v.recent_runs}
    async with pool.acquire() as conn:
        committed = await outbox.committed_keys(conn, list(keys.values())) if v.managed else None
        beat = await heartbeats.get(conn, v.schedule_id)
    runs = []
    for r in sorted(v.recent_runs, key=lambda r: r.scheduled_at, reverse=True):
        status, outcome = await run_outcome(client, r.workflow_id, r.run_id, managed=v.managed)
        runs.append(
            {
                "logical_key": keys[r.workflow_id],
                "scheduled_at": utc_text_or_none(r.scheduled_at),
                "started_at": utc_text_or_none(r.started_at),
                **local_fields(zone, scheduled_at=r.scheduled_at, started_at=r.started_at),
                "workflow_id": r.workflow_id,
                "status": status,
                "outcome": outcome,
                "committed": None if committed is None else keys[r.workflow_id] in committed,
            }
        )
    return {
        **view_json(v),
        "catchup_window": v.catchup_window,
        "pause_on_failure": v.pause_on_failure,
        "orphaned": v.orphaned,
        "next_fire_times": [utc_text_or_none(t) for t in v.next_fire_times[:5]],
        **(
            {"next_fire_times_local": [local_or_none(t, zone) for t in v.next_fire_times[:5]]}
            if zone is not None
            else {}
        ),
        "recent_runs": runs,
        "running": v.running,
        "skipped_overlap": v.skipped_overlap,
        "missed_catchup": v.missed_catchup,
        "heartbeat": None
        if beat is None
        else {
            "last_logical_key": beat["last_logical_key"],
            "last_success_at": utc_text_or_none(beat["last_success_at"]),
            # Replays (`backfill run`) are recorded apart: they never move the live fields.
            "last_replay_key": beat.get("last_replay_key"),
            "last_replay_at": utc_text_or_none(beat.get("last_replay_at")),
            # A failed replay's error, never the live `last_error` below.
            "last_replay_error": replay_error_json(beat),
            "next_expected_at": utc_text_or_none(beat["next_expected_at"]),
            **local_fields(
                zone,
                last_success_at=beat["last_success_at"],
                last_replay_at=beat.get("last_replay_at"),
                next_expected_at=beat["next_expected_at"],
            ),
            "grace_seconds": int(beat["grace"].total_seconds()),
            "paused": beat["paused"],
            "paused_reason": beat["paused_reason"],
            "last_error": beat["last_error"],
            "skipped_lease": beat["lease_skips"],
            "last_lease_skip": lease_skip_json(beat),
        },
        "definition": v.definition,
        # Why the last day's slots without a commit have none, and what closes each gap.
        "slot_causes": _with_local_causes(
            v.schedule_id, await _slot_causes(client, pool, v) if v.managed else None, zone
        ),
    }


def _with_local_causes(schedule_id: str, found: Any, zone: str | None) -> Any:
    if zone is None or not isinstance(found, dict):
        return found
    return {**found, "causes": causes_with_local(schedule_id, found.get("causes"), zone)}


async def _slot_causes(client: Client, pool: asyncpg.Pool, v: ScheduleView) -> Any:
    try:
        return await recent_causes(client, pool, v.schedule_id)
    except CronwardenError:
        # Marked managed but not a run of ours to judge (its action is not our workflow): the
        # rest of the description still stands.
        return None


def slot_causes_lines(
    found: dict[str, Any] | None, *, schedule_id: str = "", zone: str | None = None
) -> list[str]:
    """`describe`'s lines for the last day's slots without a commit (`slot_causes`); a zoned
    schedule's first and last keys with their local time."""
    if found is None:
        return []
    window = found["window"]
    head = f"missing      {found['missing']} since {window['start']}"
    if found["paused_fires"]:
        head += f", {found['paused_fires']} held by a pause"
    return [head, *causes_lines(causes_for_text(schedule_id, found["causes"], zone))]
