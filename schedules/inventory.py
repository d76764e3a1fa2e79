"""What is in Temporal: every schedule of the namespace, described, and which of them are ours.

A schedule is managed when its schedule-level memo carries `MANAGED_MEMO` (set by `apply` at
creation). Everything else is listed as unmanaged and never changed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import TypeAdapter, ValidationError
from temporalio.api.schedule.v1 import ScheduleListEntry
from temporalio.client import (
    Client,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionStartWorkflow,
    ScheduleDescription,
    ScheduleOverlapPolicy,
    ScheduleSpec,
)
from temporalio.service import RPCError, RPCStatusCode

from cronwarden.activities.contract import ORPHAN_NOTE_PREFIX
from cronwarden.errors import CronwardenError
from cronwarden.schedules import schedule_list
from cronwarden.schedules.bounded import map_bounded
from cronwarden.schedules.mapping import DEFINITION_MEMO, MANAGED_MEMO, marks_managed
from cronwarden.times import duration_text, format_duration, utc_text

# How many ids an "unknown schedule" error lists before it says "…".
_KNOWN_SHOWN = 10
# Describes in flight at once when many schedules are read (list, status, apply's plan).
DESCRIBE_CONCURRENCY = 16
_TIMEDELTA = TypeAdapter(timedelta)


class NoSuchSchedule(CronwardenError):
    """The id names no schedule in Temporal."""


class NotManaged(CronwardenError):
    """A schedule with this id exists but cronwarden did not create it."""


class UnreadableMemo(CronwardenError):
    """The schedule's managed marker is encoded with a payload codec this process lacks."""


@dataclass
class RecentRun:
    scheduled_at: datetime
    started_at: datetime
    workflow_id: str
    run_id: str


@dataclass
class ScheduleView:
    """One schedule as Temporal describes it, with cronwarden's stored definition if managed."""

    schedule_id: str
    managed: bool
    definition: dict[str, Any] | None
    """The definition `apply` stored in the action memo (JSON form); None when unmanaged."""
    spec: str
    overlap: str
    catchup_window: str | None
    pause_on_failure: bool
    paused: bool
    note: str | None
    next_fire_times: list[datetime]
    recent_runs: list[RecentRun]
    running: list[str]
    skipped_overlap: int
    missed_catchup: int
    description: ScheduleDescription = field(repr=False)
    memo_unreadable: bool = False
    """The managed marker could not be decoded (another payload codec): listed as unmanaged."""

    @property
    def job(self) -> str | None:
        job = (self.definition or {}).get("job")
        return job if isinstance(job, str) else None

    @property
    def task_queue(self) -> str | None:
        if self.definition is not None and isinstance(self.definition.get("task_queue"), str):
            return str(self.definition["task_queue"])
        action = self.description.schedule.action
        return action.task_queue if isinstance(action, ScheduleActionStartWorkflow) else None

    @property
    def orphaned(self) -> bool:
        """Paused by a worker that does not have the schedule's job."""
        return self.paused and (self.note or "").startswith(ORPHAN_NOTE_PREFIX)


async def managed_marker(desc: ScheduleDescription) -> bool | None:
    """Whether `apply` created the schedule; None when its marker cannot be decoded.

    Only our own key is decoded: another team's memo keys may use an encoding (their codec)
    that this process cannot read, and must not make listing fail. The list's entries carry
    the same schedule-level memo (`schedule_list.managed_markers`).
    """
    if MANAGED_MEMO not in desc.raw_description.memo.fields:
        return False
    try:
        value = await desc.memo_value(MANAGED_MEMO)
    except Exception:  # an unknown encoding or a codec that refuses it: unreadable, not fatal
        return None
    return marks_managed(value)


async def is_managed(desc: ScheduleDescription) -> bool:
    """Managed and readable; an undecodable marker counts as unmanaged (left alone)."""
    return await managed_marker(desc) is True


async def is_managed_or_refuse(desc: ScheduleDescription) -> bool:
    """For an id the user names: an undecodable marker is an error naming the codec setting,
    not a silent "unmanaged"."""
    marker = await managed_marker(desc)
    if marker is None:
        raise UnreadableMemo(unreadable_message(desc.id))
    return marker


def unreadable_message(schedule_id: str) -> str:
    return (
        f"schedule '{schedule_id}' has a memo this process cannot decode (written through a "
        "payload codec it does not have): set CRONWARDEN_PAYLOAD_CODEC to that codec, or give "
        "this schedule another id"
    )


async def action_memo(client: Client, desc: ScheduleDescription) -> dict[str, Any]:
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


async def describe_or_none(client: Client, schedule_id: str) -> ScheduleDescription | None:
    try:
        return await client.get_schedule_handle(schedule_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


async def describe_many(
    client: Client, schedule_ids: Sequence[str]
) -> list[ScheduleDescription | None]:
    """`describe_or_none` of each id, in order, DESCRIBE_CONCURRENCY at a time."""
    return await map_bounded(
        lambda schedule_id: describe_or_none(client, schedule_id),
        schedule_ids,
        limit=DESCRIBE_CONCURRENCY,
    )


async def schedule_ids(client: Client) -> list[str]:
    """Every schedule id of the namespace. Temporal's list is eventually consistent: a schedule
    created or deleted a moment ago may be missing or still listed."""
    return sorted([listed.id async for listed in await client.list_schedules()])


async def view(client: Client, desc: ScheduleDescription) -> ScheduleView:
    marker = await managed_marker(desc)
    managed = marker is True
    definition = (await action_memo(client, desc)).get(DEFINITION_MEMO) if managed else None
    if not isinstance(definition, dict):
        definition = None
    policy, info, state = desc.schedule.policy, desc.info, desc.schedule.state
    return ScheduleView(
        schedule_id=desc.id,
        managed=managed,
        definition=definition,
        spec=spec_text(definition, desc.schedule.spec),
        overlap=_overlap_name(policy.overlap),
        catchup_window=duration_text(policy.catchup_window) if policy.catchup_window else None,
        pause_on_failure=policy.pause_on_failure,
        paused=state.paused,
        note=state.note or None,
        next_fire_times=list(info.next_action_times),
        recent_runs=[
            RecentRun(
                scheduled_at=r.scheduled_at,
                started_at=r.started_at,
                workflow_id=r.action.workflow_id,
                run_id=r.action.first_execution_run_id,
            )
            for r in info.recent_actions
            if isinstance(r.action, ScheduleActionExecutionStartWorkflow)
        ],
        running=[
            r.workflow_id
            for r in info.running_actions
            if isinstance(r, ScheduleActionExecutionStartWorkflow)
        ],
        skipped_overlap=info.num_actions_skipped_overlap,
        missed_catchup=info.num_actions_missed_catchup_window,
        description=desc,
        memo_unreadable=marker is None,
    )


async def get_view(client: Client, schedule_id: str) -> ScheduleView:
    """The schedule `schedule_id`; NoSuchSchedule lists the ids that do exist."""
    desc = await describe_or_none(client, schedule_id)
    if desc is None:
        raise await no_such_schedule(client, schedule_id)
    return await view(client, desc)


async def get_managed(client: Client, schedule_id: str) -> ScheduleView:
    """Like `get_view`, refusing a schedule cronwarden did not create."""
    found = await get_view(client, schedule_id)
    if found.memo_unreadable:
        raise UnreadableMemo(unreadable_message(schedule_id))
    if not found.managed:
        raise NotManaged(
            f"schedule '{schedule_id}' was not created by cronwarden; it is left alone "
            "(manage it with the tool that created it)"
        )
    return found


@dataclass
class ListedView:
    """One schedule as Temporal's schedule list shows it: no describe per schedule.

    The list carries the spec, the pause and its note, and the next fire times, not the action
    memo nor the policies nor the counters: a managed schedule's definition (job, overlap, the
    spec as the file writes it) comes from the definitions `apply` recorded in Postgres, and
    what only a describe knows is None ("not read"). `schedules describe ID` shows all of it.
    """

    schedule_id: str
    managed: bool
    definition: dict[str, Any] | None
    spec: str
    overlap: str | None
    paused: bool
    note: str | None
    next_fire_times: list[datetime]
    memo_unreadable: bool = False
    running: list[str] | None = None
    skipped_overlap: int | None = None
    missed_catchup: int | None = None
    recent_fires: list[datetime] = field(default_factory=list)
    """The nominal times of Temporal's last few starts (its recent actions, from the list)."""

    @property
    def job(self) -> str | None:
        job = (self.definition or {}).get("job")
        return job if isinstance(job, str) else None

    @property
    def orphaned(self) -> bool:
        return self.paused and (self.note or "").startswith(ORPHAN_NOTE_PREFIX)


async def listed_views(
    client: Client,
    definitions: Mapping[str, dict[str, Any]],
    *,
    page_size: int = schedule_list.PAGE_SIZE,
) -> list[ScheduleView | ListedView]:
    """Every schedule of the namespace, in id order, from Temporal's paged schedule list (a
    handful of calls for ten thousand schedules, where a describe each took minutes).

    `definitions`: the latest definition `apply` recorded for each schedule id. A managed
    schedule without one (another deployment's, sharing the namespace; or one applied before
    definitions were recorded, until the next apply records it) shows Temporal's spec and no
    job. Only an entry the list shows without its details (a server without advanced
    visibility) is described. The list is eventually consistent: a schedule created or deleted
    a moment ago may be missing or still listed.
    """
    found: list[ScheduleView | ListedView] = []
    to_describe: list[str] = []
    # Closed on the way out whatever happens, so no page request outlives the listing.
    pages = contextlib.aclosing(schedule_list.list_pages(client, page_size=page_size))
    async with pages as reader:
        async for page in reader:
            markers = await schedule_list.managed_markers(client, page)
            for entry, marker in zip(page, markers, strict=True):
                if entry.HasField("info"):
                    found.append(_listed_view(entry, marker, definitions))
                else:
                    to_describe.append(entry.schedule_id)
    for desc in await describe_many(client, to_describe):
        if desc is not None:
            found.append(await view(client, desc))
    return sorted(found, key=lambda v: v.schedule_id)


def _listed_view(
    entry: ScheduleListEntry, marker: bool | None, definitions: Mapping[str, dict[str, Any]]
) -> ListedView:
    definition = definitions.get(entry.schedule_id) if marker is True else None
    return ListedView(
        schedule_id=entry.schedule_id,
        managed=marker is True,
        definition=definition,
        spec=spec_text(None, schedule_list.listed_spec(entry))
        if definition is None
        else definition_spec_text(definition),
        overlap=_definition_text(definition, "overlap"),
        paused=entry.info.paused,
        note=entry.info.notes or None,
        next_fire_times=schedule_list.next_action_times(entry),
        memo_unreadable=marker is None,
        recent_fires=[
            datetime.fromtimestamp(a.schedule_time.seconds, UTC) for a in entry.info.recent_actions
        ],
    )


def _definition_text(definition: dict[str, Any] | None, key: str) -> str | None:
    value = (definition or {}).get(key)
    return value if isinstance(value, str) else None


async def no_such_schedule(client: Client, schedule_id: str) -> NoSuchSchedule:
    """The one wording of an unknown id, in every command: `no schedule 'x' (known: a, b)`."""
    ids = await schedule_ids(client)
    shown = ", ".join(ids[:_KNOWN_SHOWN]) or "none"
    more = ", …" if len(ids) > _KNOWN_SHOWN else ""
    return NoSuchSchedule(f"no schedule '{schedule_id}' (known: {shown}{more})")


def spec_text(definition: dict[str, Any] | None, spec: ScheduleSpec) -> str:
    """The spec as the schedule file writes it; for a foreign schedule, Temporal's spec.

    Every part that changes when a schedule fires is shown: the period, the exclusions and the
    jitter, so `status` and `describe` never show a finished or holiday-skipping schedule as a
    plain cron.
    """
    if definition is not None:
        return definition_spec_text(definition)
    parts = [f"cron {c}" for c in spec.cron_expressions]
    parts += [f"every {duration_text(i.every)}" for i in spec.intervals]
    if spec.calendars:
        parts.append(f"{len(spec.calendars)} calendar(s)")
    if spec.start_at:
        parts.append(f"from {utc_text(spec.start_at)}")
    if spec.end_at:
        parts.append(f"until {utc_text(spec.end_at)}")
    if spec.skip:
        parts.append(f"{len(spec.skip)} skip calendar(s)")
    if spec.jitter:
        parts.append(f"jitter {duration_text(spec.jitter)}")
    return "; ".join(parts) or "no spec"


def definition_spec_text(definition: dict[str, Any]) -> str:
    """The spec as the schedule file writes it."""
    parts = _trigger_parts(definition)
    if definition.get("start_at"):
        parts.append(f"from {definition['start_at']}")
    if definition.get("end_at"):
        parts.append(f"until {definition['end_at']}")
    skips = definition.get("exclude") or []
    if skips:
        parts.append("except " + ", ".join(_skip_text(s) for s in skips))
    if definition.get("jitter"):
        parts.append(f"jitter {_json_duration(definition['jitter'])}")
    if isinstance(definition.get("timezone"), str):
        # Only a zoned definition has it: the cron's wall times are that zone's.
        parts.append(f"timezone {definition['timezone']}")
        parts += [f"{k} {definition[k]}" for k in ("dst_gap", "dst_repeat") if definition.get(k)]
    return "; ".join(parts) or "no spec"


def _trigger_parts(definition: dict[str, Any]) -> list[str]:
    cron = definition.get("cron")
    if cron:
        return [f"cron {c}" for c in ([cron] if isinstance(cron, str) else cron)]
    if definition.get("every"):
        return [f"every {_json_duration(definition['every'])}"]
    return []


def _json_duration(value: Any) -> str:
    try:
        return format_duration(_TIMEDELTA.validate_python(value))
    except (ValidationError, ValueError):
        return str(value)


def _skip_text(skip: Any) -> str:
    """A whole-day exclusion of one date as that date; anything else as its non-`*` fields."""
    if not isinstance(skip, dict):
        return str(skip)
    fields = {k: str(v) for k, v in skip.items() if str(v) != "*"}
    if set(fields) == {"year", "month", "day_of_month"} and all(
        v.isdigit() for v in fields.values()
    ):
        return f"{fields['year']}-{int(fields['month']):02d}-{int(fields['day_of_month']):02d}"
    return " ".join(f"{k}={v}" for k, v in fields.items()) or "every time"


def _overlap_name(policy: ScheduleOverlapPolicy) -> str:
    names = {
        ScheduleOverlapPolicy.SKIP: "skip",
        ScheduleOverlapPolicy.BUFFER_ONE: "buffer_one",
        ScheduleOverlapPolicy.ALLOW_ALL: "allow_all",
    }
    return names.get(policy, policy.name.lower())
