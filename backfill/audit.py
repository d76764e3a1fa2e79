"""`cronwarden audit`: what should have run, set against what committed, what is running, and
what Temporal says it skipped or missed.

Temporal's UI shows what ran; nothing there lists the fires that never became an execution
(skipped for overlap, dropped beyond the catchup window, lost while paused). Here the expected
set is Temporal's own evaluation of the spec, and the outbox says which of those committed.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import chain
from typing import Any

import asyncpg
from temporalio.client import Client, ScheduleActionExecutionStartWorkflow, ScheduleDescription
from temporalio.common import SearchAttributeKey

from cronwarden.activities.contract import fire_time_of_key, logical_key
from cronwarden.backfill.causes import Causes
from cronwarden.backfill.explain import explain, name_off_grid
from cronwarden.backfill.plan import (
    FireTimes,
    GoneSchedule,
    Judged,
    ManagedSchedule,
    awaiting_notes,
    judged_notes,
    life_start,
    paused_notes,
    plan_on,
)
from cronwarden.backfill.window import Window
from cronwarden.schedules.run_ids import REPLAY_INFIX, replay_fire_time, scheduled_fire_time
from cronwarden.schedules.status import lease_skip_json
from cronwarden.store import heartbeats, outbox
from cronwarden.store.pause_history import Pause
from cronwarden.times import utc_text_or_none
from cronwarden.workflows.scheduled_run import WORKFLOW_NAME

SCHEDULED_BY_ID = SearchAttributeKey.for_keyword("TemporalScheduledById")


@dataclass
class Audit:
    schedule_id: str
    window: Window
    expected: int
    committed: int
    """Expected fire times with an outbox record."""
    committed_off_spec: int
    """Outbox records in the window at times the definition in force does not produce (a manual
    trigger, a spec changed since)."""
    in_flight: FireTimes
    """Expected fire times whose run is executing now (no outbox record yet)."""
    missing: FireTimes
    """Expected fire times with neither an outbox record nor a run in flight."""
    actions_total: int
    skipped_overlap_total: int
    missed_catchup_window_total: int
    paused: bool
    lease_skips_total: int = 0
    """Live fires the lease skipped since the schedule's heartbeat row was created."""
    last_lease_skip: dict[str, Any] | None = None
    """The last of them (`logical_key`, `holder`, `at`); if its key is missing here, it is
    listed as skipped at the lease rather than merely missing."""
    awaiting_jitter: FireTimes = field(default_factory=FireTimes)
    """Expected fire times with no outbox record and no run in flight whose nominal time has
    passed but whose jittered start may still come: not missing yet."""
    judged: list[Judged] = field(default_factory=list)
    """The parts of the window, each with what its fire times came from (backfill/plan.py)."""
    paused_fires: FireTimes = field(default_factory=FireTimes)
    """Expected fire times with no outbox record that fell inside an operator pause: held on
    purpose, not missing."""
    pauses: list[Pause] = field(default_factory=list)
    gone: GoneSchedule | None = None
    """Set when Temporal no longer holds the schedule: audited from its history alone, and
    Temporal's counters (`actions_total` ...) are unknown."""
    causes: Causes | None = None
    """Why each slot without a commit has none (missing, in flight, held), by cause."""

    def notes(self) -> list[str]:
        """Text lines for what the counts alone do not say (printed under them)."""
        return (
            judged_notes(self.judged)
            + awaiting_notes(len(self.awaiting_jitter))
            + paused_notes(len(self.paused_fires), self.pauses)
        )

    @property
    def lease_skipped(self) -> list[datetime]:
        """Missing fire times known to have ended `overlap-locked` at the lease: at most the
        last skip's, looked up in the missing times rather than by formatting each one."""
        key = (self.last_lease_skip or {}).get("logical_key")
        fire_time = fire_time_of_key(self.schedule_id, key) if isinstance(key, str) else None
        return [fire_time] if fire_time is not None and fire_time in self.missing else []

    def as_json(self) -> dict[str, Any]:
        """The `--json` document. Its key lists are iterators, formatted as they are written:
        write it with `schedules.json_stream.dump`."""
        return {
            "schedule_id": self.schedule_id,
            "window": self.window.as_json(),
            "expected": self.expected,
            "committed": self.committed,
            "in_flight": len(self.in_flight),
            "missing": len(self.missing),
            "committed_off_spec": self.committed_off_spec,
            "missing_keys": self.missing.keys(self.schedule_id),
            "in_flight_keys": self.in_flight.keys(self.schedule_id),
            "awaiting_jitter": len(self.awaiting_jitter),
            "awaiting_jitter_keys": self.awaiting_jitter.keys(self.schedule_id),
            "judged_by": [j.as_json() for j in self.judged],
            "paused_fires": len(self.paused_fires),
            "paused_keys": self.paused_fires.keys(self.schedule_id),
            "pauses": [p.as_json() for p in self.pauses],
            "deleted": self.gone is not None,
            "deleted_at": utc_text_or_none(self.gone.deleted_at) if self.gone else None,
            "skipped_lease_keys": iter(
                [logical_key(self.schedule_id, t) for t in self.lease_skipped]
            ),
            "lease": {
                "skipped_total": self.lease_skips_total,
                "last_skip": self.last_lease_skip,
            },
            "causes": self.causes.as_json() if self.causes else [],
            "temporal_counts": self.causes.temporal if self.causes else [],
            "temporal": None
            if self.gone
            else {
                "paused": self.paused,
                "actions_total": self.actions_total,
                "skipped_overlap_total": self.skipped_overlap_total,
                "missed_catchup_window_total": self.missed_catchup_window_total,
            },
        }


async def audit(
    client: Client,
    pool: asyncpg.Pool,
    schedule: ManagedSchedule | GoneSchedule,
    window: Window,
    *,
    now: datetime | None = None,
) -> Audit:
    """The audit of the window, clamped to the start of the id's first known life. A jittered
    fire is not missing before its nominal time plus the jitter has passed (at `now`, the clock
    if not given): it is listed as awaiting its jitter, or running once it started. A schedule
    Temporal no longer holds is audited from its recorded history."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        window = window.clamped_to(await life_start(conn, schedule))
        # One snapshot for the plan's pages and the window's count: a fire that commits while
        # the audit runs is then either in both or in neither, never counted as off the spec.
        planned = await plan_on(
            client,
            conn,
            schedule.schedule_id,
            window,
            now=now,
            live=schedule.description,
            gone=schedule.description is None,
        )
        running = await running_fire_times(client, schedule)
        in_window = (
            0
            if window.empty
            else await outbox.done_in_window(conn, schedule.schedule_id, window.start, window.end)
        )
        beat = await heartbeats.get(conn, schedule.schedule_id)
        # Fires in flight are few (a run or two, the replays of a running backfill): split
        # them off the missing times without a datetime per missing key.
        running_seconds = {int(t.timestamp()) for t in running}
        missing, awaiting = planned.missing, planned.awaiting_jitter
        still_missing = array(
            "q",
            missing if not running_seconds else (s for s in missing if s not in running_seconds),
        )
        in_flight = sorted(
            s for s in chain(missing, awaiting, planned.paused) if s in running_seconds
        )
        held = array("q", (s for s in planned.paused if s not in running_seconds))
        causes = await explain(
            client,
            conn,
            schedule,
            window=window,
            missing=still_missing,
            in_flight=in_flight,
            held=held,
            pauses=planned.pauses,
            beat=beat,
            now=now or datetime.now(UTC),
        )
        await name_off_grid(
            client,
            conn,
            causes,
            window=window,
            count=in_window - planned.done,
            live=schedule.description,
        )
    desc = schedule.description
    gone = schedule if isinstance(schedule, GoneSchedule) else None
    return Audit(
        schedule_id=schedule.schedule_id,
        window=window,
        expected=planned.expected,
        committed=planned.done,
        committed_off_spec=in_window - planned.done,
        # A jittered fire whose start has come is running, whether or not its jitter is out.
        in_flight=FireTimes(in_flight),
        missing=FireTimes(still_missing),
        actions_total=desc.info.num_actions if desc else 0,
        skipped_overlap_total=desc.info.num_actions_skipped_overlap if desc else 0,
        missed_catchup_window_total=desc.info.num_actions_missed_catchup_window if desc else 0,
        paused=desc.schedule.state.paused if desc else False,
        lease_skips_total=beat["lease_skips"] if beat else 0,
        last_lease_skip=lease_skip_json(beat),
        awaiting_jitter=FireTimes(s for s in awaiting if s not in running_seconds),
        judged=planned.judged,
        # A held fire still running (a run started just before the pause) is in flight.
        paused_fires=FireTimes(held),
        pauses=planned.pauses,
        gone=gone,
        causes=causes,
    )


async def running_fire_times(
    client: Client, schedule: ManagedSchedule | GoneSchedule
) -> set[datetime]:
    """Fire times of the schedule's runs executing now (see `running_fire_times_of`)."""
    return await running_fire_times_of(client, schedule.schedule_id, schedule.description)


async def running_fire_times_of(
    client: Client, schedule_id: str, description: ScheduleDescription | None
) -> set[datetime]:
    """Fire times of the schedule's runs executing now: scheduled fires (describe's running
    actions, exact, and visibility for those an `allow_all` schedule does not track) and replays
    (visibility, which may lag a second or two behind a start).

    A replay's id cannot be a scheduled run's (schedules/run_ids.py); still, Temporal tags every
    scheduled run with `TemporalScheduledById`, so a listed run counts as a replay of this
    schedule only without that tag, and as its scheduled run only with this schedule's id in it.
    """
    running_actions = description.info.running_actions if description is not None else []
    times = {
        t
        for action in running_actions
        if isinstance(action, ScheduleActionExecutionStartWorkflow)
        and (t := scheduled_fire_time(schedule_id, action.workflow_id)) is not None
    }
    query = (
        f"WorkflowType = '{WORKFLOW_NAME}' AND ExecutionStatus = 'Running' "
        f"AND ({SCHEDULED_BY_ID.name} = '{schedule_id}' "
        f"OR WorkflowId STARTS_WITH '{schedule_id}{REPLAY_INFIX}')"
    )
    async for execution in client.list_workflows(query):
        scheduled_by = execution.typed_search_attributes.get(SCHEDULED_BY_ID)
        if scheduled_by == schedule_id:
            fire_time = scheduled_fire_time(schedule_id, execution.id)
        elif not scheduled_by:
            fire_time = replay_fire_time(schedule_id, execution.id)
        else:
            # Another schedule's run whose id merely looks like one of ours.
            fire_time = None
        if fire_time is not None:
            times.add(fire_time)
    return times
