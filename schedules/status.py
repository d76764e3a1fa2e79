"""`cronwarden status`: one row per schedule, from Temporal (spec, pause, counters) and the
heartbeat rows (last success, next expected, last error).

A row is a `StatusRow`; its `as_json()` is the documented `--json` shape, so a new column is one
field and one key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

import asyncpg
from temporalio.client import Client

from cronwarden.activities.contract import ORPHAN_NOTE_PREFIX, logical_key
from cronwarden.backfill.causes import slot_key
from cronwarden.backfill.explain import causes_of_keys
from cronwarden.schedules.health import (
    LATE,
    OPERATOR,
    OPERATOR_NOTE,
    OVERDUE,
    counting_missing,
    derive_health,
    format_age,
    held_by_operator,
    paused_by,
    settle_time,
)
from cronwarden.schedules.inventory import (
    ListedView,
    ScheduleView,
    describe_many,
    listed_views,
)
from cronwarden.schedules.inventory import view as view_of
from cronwarden.schedules.local_times import (
    causes_with_local,
    horizon_warning,
    key_local,
    local_fields,
    local_or_none,
    zone_fields,
    zone_of_definition,
)
from cronwarden.schedules.zones import ZONE_DB_VERSION
from cronwarden.store import definitions as definition_store
from cronwarden.store import heartbeats as heartbeat_store
from cronwarden.store import incidents as incident_store
from cronwarden.store import locks as lock_store
from cronwarden.store import notifications as notification_store
from cronwarden.store import outbox as outbox_store
from cronwarden.store.heartbeats import lifted_deadline
from cronwarden.times import utc_text_or_none


@dataclass
class StatusRow:
    schedule_id: str
    managed: bool
    in_temporal: bool
    """False for a heartbeat row whose schedule is gone from Temporal (deleted elsewhere)."""
    job: str | None
    spec: str
    overlap: str | None
    paused: bool
    """Paused in Temporal."""
    paused_by: str | None
    """`operator` (the monitor is silent), `failure` (the monitor pages) or None."""
    pause_note: str | None
    orphaned: bool
    """The worker paused it because the schedule's job is not registered there."""
    last_success_key: str | None
    last_success_at: datetime | None
    next_expected_at: datetime | None
    health: str
    last_error: str | None
    skipped_overlap: int | None
    """Temporal's counters: None when not read (only a described schedule carries them, see
    `read_views`)."""
    missed_catchup: int | None
    now: datetime
    lease_skips: int = 0
    """Live fires that ended `overlap-locked` at the lease (a shared lock's other holder, a
    stale holder within its TTL): skipped by cronwarden, not by Temporal's overlap policy."""
    last_lease_skip: dict[str, Any] | None = None
    """The last of them: `logical_key`, `holder` (the run holding the lease), `at`."""
    incident: dict[str, Any] | None = None
    """The schedule's open incident (`cronwarden monitor`), if any."""
    last_replay_key: str | None = None
    last_replay_at: datetime | None = None
    """The last `backfill run` replay committed (replays never move the live fields)."""
    last_replay_error: dict[str, Any] | None = None
    """The last replay that failed, apart from `last_error` (see `replay_error_json`)."""
    missing: list[str] = field(default_factory=list)
    """Keys of Temporal's recent starts with no commit, no run at the lease and no recorded
    skip, past their settling time (`count_missing`); the health is never `ok` beside one."""
    causes: list[dict[str, Any]] | None = None
    """Why they are missing and what closes the gap (`backfill/causes.py`), for the first
    `EXPLAINED_ROWS` rows with missing slots; None: not read."""
    timezone: str | None = None
    """The zone whose wall clock the schedule's cron names (None: UTC): its times are shown
    in local time too."""
    horizon_warning: str | None = None
    """A zoned schedule whose compiled entries end soon: re-apply to compile further."""

    @property
    def last_success_age(self) -> timedelta | None:
        return self.now - self.last_success_at if self.last_success_at else None

    def as_json(self) -> dict[str, Any]:
        age = self.last_success_age
        zone = self.timezone
        data = {
            "schedule_id": self.schedule_id,
            "managed": self.managed,
            "in_temporal": self.in_temporal,
            "job": self.job,
            "spec": self.spec,
            "overlap": self.overlap,
            "paused": self.paused,
            "paused_by": self.paused_by,
            "pause_note": self.pause_note,
            "orphaned": self.orphaned,
            "last_success": {
                "logical_key": self.last_success_key,
                "at": utc_text_or_none(self.last_success_at),
                "age_seconds": int(age.total_seconds()) if age is not None else None,
                **local_fields(zone, at=self.last_success_at),
            },
            "next_expected_at": utc_text_or_none(self.next_expected_at),
            **zone_fields(zone, next_expected_at=self.next_expected_at),
            "health": self.health,
            "last_error": self.last_error,
            "skipped_overlap": self.skipped_overlap,
            "missed_catchup": self.missed_catchup,
            "skipped_lease": self.lease_skips,
            "last_lease_skip": self.last_lease_skip,
            "incident": incident_json(self.incident),
            "last_replay": {
                "logical_key": self.last_replay_key,
                "at": utc_text_or_none(self.last_replay_at),
                **local_fields(zone, at=self.last_replay_at),
            },
            "last_replay_error": self.last_replay_error,
            "missing": {
                "count": len(self.missing),
                "keys": self.missing,
                **(
                    {"keys_local": [key_local(self.schedule_id, k, zone) for k in self.missing]}
                    if zone is not None
                    else {}
                ),
                "causes": causes_with_local(self.schedule_id, self.causes, zone),
            },
        }
        if zone is not None:
            # Only a zoned row has it: a UTC row keeps the shape its consumers know.
            data["horizon_warning"] = self.horizon_warning
        return data


def incident_json(incident: dict[str, Any] | None) -> dict[str, Any] | None:
    if incident is None:
        return None
    return {
        "id": incident["id"],
        "kind": incident["kind"],
        "summary": incident["summary"],
        "opened_at": utc_text_or_none(incident["opened_at"]),
        "system_incident_id": incident["parent_id"],
    }


def lease_skip_json(beat: dict[str, Any] | None) -> dict[str, Any] | None:
    """The heartbeat row's last lease skip, as `status`, `describe` and `audit` show it."""
    if beat is None or not beat.get("last_lease_skip_key"):
        return None
    return {
        "logical_key": beat["last_lease_skip_key"],
        "holder": beat["last_lease_skip_holder"],
        "at": utc_text_or_none(beat["last_lease_skip_at"]),
    }


def replay_error_json(beat: dict[str, Any] | None) -> dict[str, Any] | None:
    """The heartbeat row's last failed replay (`logical_key`, `error`, `at`), as `status` and
    `describe` show it: a replay's failure is never the live schedule's `last_error`. Cleared
    when a replay of that key commits."""
    if beat is None or not beat.get("last_replay_error"):
        return None
    return {
        "logical_key": beat["last_replay_error_key"],
        "error": beat["last_replay_error"],
        "at": utc_text_or_none(beat["last_replay_error_at"]),
    }


def lease_skip_text(count: int, last: dict[str, Any] | None) -> str:
    if not count or last is None:
        return f"skipped (lease) {count}"
    return (
        f"skipped (lease) {count}, last {last['logical_key']} "
        f"(lease held by {last['holder'] or 'another run'})"
    )


AnyView = ScheduleView | ListedView


async def read_views(
    client: Client,
    beats: dict[str, dict[str, Any]],
    definitions: dict[str, dict[str, Any]],
    *,
    now: datetime,
) -> list[AnyView]:
    """The schedules `status` shows, without a describe per schedule.

    Temporal's schedule list (a few paged calls) and the definitions `apply` recorded give every
    row. Only the schedules whose row the list cannot settle are described: a heartbeat's
    schedule the list does not show (the list lags behind a create: looked up directly before
    calling it gone), a late or overdue one (a run still going makes it `running`, not
    late, and its counters say what Temporal skipped or missed), and a paused one by the list
    or by its heartbeat row (the list lags behind a pause or an unpause, and the row's pause
    silences the monitor only while Temporal holds it: few schedules are paused). Healthy
    rows show no counters.
    """
    views: list[AnyView] = list(await listed_views(client, definitions))
    rows = build_rows(views, beats, now=now)
    listed = {v.schedule_id for v in views}
    unsettled = (set(beats) - listed) | {
        r.schedule_id
        for r in rows
        if r.in_temporal
        and (
            r.health in (LATE, OVERDUE)
            or r.paused
            or bool((beats.get(r.schedule_id) or {}).get("paused"))
        )
    }
    if not unsettled:
        return views
    described = {
        d.id: await view_of(client, d)
        for d in await describe_many(client, sorted(unsettled))
        if d is not None
    }
    kept = [described.pop(v.schedule_id, v) for v in views]
    return sorted([*kept, *described.values()], key=lambda v: v.schedule_id)


async def status_rows(
    client: Client,
    beats: dict[str, dict[str, Any]],
    definitions: dict[str, dict[str, Any]],
    *,
    now: datetime,
    incidents: dict[str, dict[str, Any]] | None = None,
) -> list[StatusRow]:
    """Every row of `status`, judged at one `now`: which schedules are described (late ones)
    and the health shown must agree, else a schedule turning late in between shows late
    without the describe that would have found its run still going."""
    views = await read_views(client, beats, definitions, now=now)
    return build_rows(views, beats, now=now, incidents=incidents)


@dataclass(frozen=True)
class StatusReport:
    """Everything `status` shows, read at one `now`."""

    generated_at: datetime
    rows: list[StatusRow]
    system_incident: dict[str, Any] | None
    """The open incident that is about no schedule (the database check), if any."""
    dead_letters: list[dict[str, Any]]

    @property
    def zone_db(self) -> str | None:
        """The zone database's version, when any schedule shown is zoned."""
        return ZONE_DB_VERSION if any(r.timezone for r in self.rows) else None

    def as_json(self) -> dict[str, Any]:
        data = {
            "generated_at": utc_text_or_none(self.generated_at),
            "system_incident": incident_json(self.system_incident),
            "schedules": [r.as_json() for r in self.rows],
            "dead_letters": [dead_letter_json(d) for d in self.dead_letters],
        }
        if self.zone_db is not None:
            data["zone_db"] = self.zone_db
        return data


async def status_report(client: Client, pool: asyncpg.Pool, *, now: datetime) -> StatusReport:
    """Reads the heartbeats, recorded definitions, open incidents and dead letters in one
    connection, then Temporal's schedules, and judges every row at `now`."""
    async with pool.acquire() as conn:
        beats = await heartbeat_store.all_rows(conn)
        recorded = await definition_store.latest_all(conn)
        open_incidents = await incident_store.open_incidents(conn)
        dead = await notification_store.dead_letters(conn)
    by_schedule = {i["schedule_id"]: i for i in open_incidents if i["schedule_id"]}
    views = await read_views(client, beats, recorded, now=now)
    rows = build_rows(views, beats, now=now, incidents=by_schedule)
    await count_missing(client, pool, views, rows, beats, now=now)
    system = [i for i in open_incidents if i["schedule_id"] is None]
    return StatusReport(
        generated_at=now,
        rows=rows,
        system_incident=system[0] if system else None,
        dead_letters=dead,
    )


def build_rows(
    views: list[AnyView],
    beats: dict[str, dict[str, Any]],
    *,
    now: datetime,
    incidents: dict[str, dict[str, Any]] | None = None,
) -> list[StatusRow]:
    rows = [_row(v, beats.get(v.schedule_id), now=now) for v in views]
    listed = {v.schedule_id for v in views}
    rows += [_orphan_beat(beat, now=now) for sid, beat in beats.items() if sid not in listed]
    for row in rows:
        row.incident = (incidents or {}).get(row.schedule_id)
    return sorted(rows, key=lambda r: r.schedule_id)


def _row(view: AnyView, beat: dict[str, Any] | None, *, now: datetime) -> StatusRow:
    recorded = bool(beat and beat["paused"])
    # The row's pause silences the schedule only while Temporal really holds that pause (the
    # monitor judges it the same way, `monitor.pauses`).
    operator_paused = recorded and view.paused and held_by_operator(view.note)
    next_expected = beat["next_expected_at"] if beat else None
    if beat is not None and recorded and not view.paused:
        # Unpaused in Temporal alone: judged with the deadline the monitor gives it when it
        # lifts the row's pause (its next pass), so the two agree in between too.
        next_expected = lifted_deadline(
            next_expected, view.next_fire_times[0] if view.next_fire_times else None
        )
    return StatusRow(
        schedule_id=view.schedule_id,
        managed=view.managed,
        in_temporal=True,
        job=view.job,
        spec=view.spec,
        overlap=view.overlap,
        paused=view.paused,
        paused_by=paused_by(
            temporal_paused=view.paused,
            operator_paused=operator_paused or (recorded and not view.paused),
        ),
        pause_note=view.note if view.paused else beat["paused_reason"] if beat else None,
        orphaned=view.orphaned or (view.paused and _unknown_job_error(beat)),
        last_success_key=beat["last_logical_key"] if beat else None,
        last_success_at=beat["last_success_at"] if beat else None,
        last_replay_key=beat.get("last_replay_key") if beat else None,
        last_replay_at=beat.get("last_replay_at") if beat else None,
        last_replay_error=replay_error_json(beat),
        next_expected_at=next_expected,
        health=_health(
            beat,
            now=now,
            operator_paused=operator_paused,
            next_expected_at=next_expected,
            running=bool(view.running),
        ),
        last_error=beat["last_error"] if beat else None,
        skipped_overlap=view.skipped_overlap,
        missed_catchup=view.missed_catchup,
        now=now,
        lease_skips=beat.get("lease_skips", 0) if beat else 0,
        last_lease_skip=lease_skip_json(beat),
        timezone=zone_of_definition(view.definition),
        horizon_warning=horizon_warning(view.definition, now=now),
    )


def _orphan_beat(beat: dict[str, Any], *, now: datetime) -> StatusRow:
    return StatusRow(
        schedule_id=beat["schedule_id"],
        managed=True,
        in_temporal=False,
        job=None,
        spec="(not in Temporal)",
        overlap=None,
        paused=False,
        # No schedule to compare with: the row's own pause is all there is.
        paused_by=OPERATOR if beat["paused"] else None,
        pause_note=beat["paused_reason"],
        orphaned=False,
        last_success_key=beat["last_logical_key"],
        last_success_at=beat["last_success_at"],
        last_replay_key=beat.get("last_replay_key"),
        last_replay_at=beat.get("last_replay_at"),
        last_replay_error=replay_error_json(beat),
        next_expected_at=beat["next_expected_at"],
        health=_health(
            beat,
            now=now,
            operator_paused=beat["paused"],
            next_expected_at=beat["next_expected_at"],
        ),
        last_error=beat["last_error"],
        skipped_overlap=0,
        missed_catchup=0,
        now=now,
        lease_skips=beat.get("lease_skips", 0),
        last_lease_skip=lease_skip_json(beat),
    )


def _unknown_job_error(beat: dict[str, Any] | None) -> bool:
    # The worker's note can be replaced (pause_on_failure writes its own, an operator re-pauses):
    # the heartbeat's last error still says why the run failed.
    # A run since per-job queues never reaches a worker without its job: it fails waiting,
    # "no worker with job ..." (workflows/scheduled_run.py), and pause_on_failure pauses it.
    error = (beat or {}).get("last_error") or ""
    return error.startswith(("unknown job ", "no worker with job "))


def _health(
    beat: dict[str, Any] | None,
    *,
    now: datetime,
    operator_paused: bool,
    next_expected_at: datetime | None,
    running: bool = False,
) -> str:
    return derive_health(
        now=now,
        tracked=beat is not None,
        operator_paused=operator_paused,
        next_expected_at=next_expected_at,
        grace=beat["grace"] if beat else timedelta(0),
        running=running,
    )


def display_time(value: datetime | None, zone: tzinfo) -> str:
    if value is None:
        return "-"
    local = value.astimezone(zone)
    suffix = "Z" if zone is UTC else local.strftime(" %Z")
    return local.strftime("%Y-%m-%d %H:%M:%S") + suffix


def pause_text(row: StatusRow) -> str:
    if not row.paused and row.paused_by is None:
        return "no"
    kind = row.paused_by or "no"
    note = row.pause_note
    if note and row.paused_by == OPERATOR:
        # `schedules pause` writes "paused by operator: <reason>"; the column already says who.
        note = note.removeprefix(OPERATOR_NOTE).lstrip(": ") or None
    elif note and note.startswith(ORPHAN_NOTE_PREFIX):
        note = note.removeprefix("paused by cronwarden: ")
    elif row.orphaned:
        kind += ", job not registered"
    return f"{kind}: {note}" if note else kind


def dead_letter_json(row: dict[str, Any]) -> dict[str, Any]:
    """A notification the monitor gave up on (`store.notifications.dead_letters`)."""
    return {
        "notification_id": row["id"],
        "incident_id": row["incident_id"],
        "schedule_id": row["schedule_id"],
        "event": row["event"],
        "sink": row["sink"],
        "attempts": row["attempts"],
        "error": row["last_error"],
        "dead_at": utc_text_or_none(row["dead_at"]),
    }


def dead_letter_text(row: dict[str, Any], zone: tzinfo) -> str:
    target = row["schedule_id"] or "system"
    return (
        f"{row['event']} of incident #{row['incident_id']} ({target}) to {row['sink']}, "
        f"given up at {display_time(row['dead_at'], zone)}: {row['last_error']}"
    )


def incident_text(row: StatusRow) -> str:
    if row.incident is None:
        return "-"
    return f"#{row.incident['id']} {row.incident['kind']}"


def success_text(row: StatusRow) -> str:
    """The logical key (its time is the UTC fire time, whatever the display zone) and the age."""
    age = row.last_success_age
    if age is None:
        return "never"
    local = key_local(row.schedule_id, row.last_success_key, row.timezone)
    when = f"{local}, " if local else ""
    return f"{row.last_success_key or '?'} ({when}{format_age(age)} ago)"


def expected_text(row: StatusRow, zone: tzinfo) -> str:
    """The next expected fire in the display zone, and on a zoned schedule's own wall clock."""
    shown = display_time(row.next_expected_at, zone)
    local = local_or_none(row.next_expected_at, row.timezone)
    return f"{shown} ({local})" if local else shown


def zone_lines(report: StatusReport) -> list[str]:
    """Under the table when any schedule is zoned: the zone database compiled from, and each
    zoned schedule whose compiled horizon nears."""
    if report.zone_db is None:
        return []
    lines = [f"zone database: tzdata {report.zone_db} (local times of zoned schedules)"]
    lines += [
        f"warning: {r.schedule_id}: {r.horizon_warning}" for r in report.rows if r.horizon_warning
    ]
    return lines


EXPLAINED_ROWS = 10
"""Rows with missing slots whose causes `status` reads (a describe and a visibility list each);
`backfill plan` and `audit` explain any schedule."""


def recent_fire_times(view: AnyView) -> list[datetime]:
    """The nominal times of Temporal's last few starts of the schedule."""
    if isinstance(view, ScheduleView):
        return [r.scheduled_at for r in view.recent_runs]
    return view.recent_fires


async def count_missing(
    client: Client,
    pool: asyncpg.Pool,
    views: list[AnyView],
    rows: list[StatusRow],
    beats: dict[str, dict[str, Any]],
    *,
    now: datetime,
) -> None:
    """Set each managed row's missing slots among Temporal's recent starts (from the list
    already read: one outbox query and one lease query for every row, no call per schedule),
    count them in its health, and read the causes of the first `EXPLAINED_ROWS` of them.

    A start is missing once its settling time is out with no commit, no run at the lease and
    no lease skip recorded for it, as on the status page's grid. A fire Temporal dropped
    (overlap, catchup window) never started: the list does not show it, so `status` counts it
    only through Temporal's counters; the status page and `backfill plan` name it."""
    keys: dict[str, list[str]] = {}
    for v in views:
        beat = beats.get(v.schedule_id)
        if not v.managed or beat is None:
            continue
        settled = now - settle_time(beat["grace"])
        keys[v.schedule_id] = [
            logical_key(v.schedule_id, t) for t in recent_fire_times(v) if t <= settled
        ]
    wanted = [k for ks in keys.values() for k in ks]
    if not wanted:
        return
    async with pool.acquire() as conn:
        committed = await outbox_store.committed_keys(conn, wanted)
        at_lease = {key for _, key in await lock_store.active_keys(conn, list(keys))}
    explained = 0
    for row in rows:
        skip = (row.last_lease_skip or {}).get("logical_key")
        row.missing = sorted(
            k
            for k in keys.get(row.schedule_id, [])
            if k not in committed and k not in at_lease and k != skip
        )
        if row.missing and row.in_temporal and explained < EXPLAINED_ROWS:
            explained += 1
            causes = await causes_of_keys(client, pool, row.schedule_id, row.missing, now=now)
            if causes is not None:
                # A run still open (retrying between attempts, waiting for a worker) may yet
                # commit: not missing, though its cause says what it waits on.
                open_ = {slot_key(row.schedule_id, s) for s, v in causes.named if v.in_flight}
                row.missing = [k for k in row.missing if k not in open_]
                row.causes = causes.as_json()
        row.health = counting_missing(row.health, len(row.missing))
