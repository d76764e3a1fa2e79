"""`cronwarden schedules preview` against the real Temporal server: the slots a daily 01:30, a
daily 02:30 and an every-30-minutes schedule fire on the 2027 transition days of New York, Berlin
and Lord Howe, the JSON shape, and each refused input.

The expected instants are worked out here from each zone's published offsets and the rule's
words (docs/time-zones.md), never from cronwarden's zone code: a wall time is read at the offset
before the transition if that reading falls before it, and at the offset after if that reading
falls at or after it. Two readings: a repeated wall time (fixed hour: the first; `*` or a step:
each). None: a wall time in the gap, fired at the transition itself.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from cronwarden.schedules.preview import PREVIEW_PREFIX
from tests.support.cli import cli
from tests.support.paths import REPO_ROOT
from tests.support.schedules import write_schedules_file

pytestmark = pytest.mark.integration

H = timedelta(hours=1)


@dataclass(frozen=True)
class Transition:
    zone: str
    day: date
    """The local day the clocks change on."""
    instant: datetime
    """When they change (UTC)."""
    before: timedelta
    after: timedelta

    def day_window(self) -> tuple[datetime, datetime]:
        """The local day as UTC instants [start, end): its midnight at the offset before, the
        next midnight at the offset after (every transition here is in the small hours)."""
        start = datetime.combine(self.day, time(), UTC) - self.before
        end = datetime.combine(self.day + timedelta(days=1), time(), UTC) - self.after
        return start, end

    def readings(self, wall: datetime) -> list[datetime]:
        """The instants whose wall clock reads `wall` (naive), from the offsets alone."""
        found = []
        early = wall.replace(tzinfo=UTC) - self.before
        if early < self.instant:
            found.append(early)
        late = wall.replace(tzinfo=UTC) - self.after
        if late >= self.instant and late not in found:
            found.append(late)
        return sorted(found)

    def rule(self, walls: list[time], *, each: bool) -> list[datetime]:
        """The rule's instants on the day for these wall times (dst_gap shift)."""
        fired: set[datetime] = set()
        for clock in walls:
            readings = self.readings(datetime.combine(self.day, clock))
            if not readings:
                fired.add(self.instant)  # in the gap: at its end
            elif each:
                fired.update(readings)
            else:
                fired.add(readings[0])
        return sorted(fired)


# From the IANA rules: New York EST -5 / EDT -4 (changes at 02:00 local); Berlin CET +1 / CEST +2
# (changes at 01:00 UTC); Lord Howe +10:30 / +11 (changes at 02:00 local, by 30 minutes).
TRANSITIONS = [
    Transition(
        "America/New_York", date(2027, 3, 14), datetime(2027, 3, 14, 7, tzinfo=UTC), -5 * H, -4 * H
    ),
    Transition(
        "America/New_York", date(2027, 11, 7), datetime(2027, 11, 7, 6, tzinfo=UTC), -4 * H, -5 * H
    ),
    Transition(
        "Europe/Berlin", date(2027, 3, 28), datetime(2027, 3, 28, 1, tzinfo=UTC), 1 * H, 2 * H
    ),
    Transition(
        "Europe/Berlin", date(2027, 10, 31), datetime(2027, 10, 31, 1, tzinfo=UTC), 2 * H, 1 * H
    ),
    Transition(
        "Australia/Lord_Howe",
        date(2027, 4, 4),
        datetime(2027, 4, 3, 15, tzinfo=UTC),
        11 * H,
        10.5 * H,
    ),
    Transition(
        "Australia/Lord_Howe",
        date(2027, 10, 3),
        datetime(2027, 10, 2, 15, 30, tzinfo=UTC),
        10.5 * H,
        11 * H,
    ),
]
HALF_HOURS = [time(h, m) for h in range(24) for m in (0, 30)]

# The instants the rule gives on each transition day, spelled out (UTC) for the fixed-hour
# schedules, as a check on the reference above.
SPELLED_OUT = {
    ("America/New_York", date(2027, 3, 14)): (["06:30"], ["07:00"]),  # 02:30 in the gap
    ("America/New_York", date(2027, 11, 7)): (["05:30"], ["07:30"]),  # 01:30 EDT, not EST
    ("Europe/Berlin", date(2027, 3, 28)): (["00:30"], ["01:00"]),
    ("Europe/Berlin", date(2027, 10, 31)): (["10-30 23:30"], ["00:30"]),  # 02:30 CEST, not CET
    ("Australia/Lord_Howe", date(2027, 4, 4)): (["03 14:30"], ["03 16:00"]),  # 01:30 +11 only
    ("Australia/Lord_Howe", date(2027, 10, 3)): (["02 15:00"], ["02 15:30"]),
}

SCHEDULES = """\
timezone: {zone}
schedules:
  - id: daily-0130
    job: probe
    cron: "30 1 * * *"
  - id: daily-0230
    job: probe
    cron: "30 2 * * *"
  - id: half-hourly
    job: probe
    cron: "*/30 * * * *"
"""


def z(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def spelled(t: Transition, texts: list[str]) -> list[datetime]:
    """`HH:MM` on the transition's day, `DD HH:MM` on another day of its month, `MM-DD HH:MM`."""
    found = []
    for text in texts:
        when, _, clock = text.rpartition(" ")
        month, day = t.day.month, t.day.day
        if "-" in when:
            month, day = map(int, when.split("-"))
        elif when:
            day = int(when)
        hour, minute = map(int, clock.split(":"))
        found.append(datetime(t.day.year, month, day, hour, minute, tzinfo=UTC))
    return found


@pytest_asyncio.fixture(loop_scope="session")
async def no_scratch_left(client: Client) -> AsyncIterator[None]:
    """Every scratch copy a command of the test made is deleted by the time it exits (copies
    left by other tests of the session on purpose, created before, are not this test's)."""
    began = datetime.now(UTC) - timedelta(seconds=1)
    yield
    left = [e.id async for e in await client.list_schedules() if e.id.startswith(PREVIEW_PREFIX)]
    kept = []
    for sid in left:
        try:
            desc = await client.get_schedule_handle(sid).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                continue  # listed, already deleted: the list lags behind
            raise
        if desc.info.created_at >= began:
            kept.append(sid)
    assert kept == []


async def preview_json(
    env: dict[str, str], path: Path, start: datetime, end: datetime
) -> dict[str, Any]:
    result = await cli(
        env, "schedules", "preview", str(path), "--from", z(start), "--to", z(end), "--json"
    )
    assert result.code == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


@pytest.mark.parametrize("t", TRANSITIONS, ids=lambda t: f"{t.zone}-{t.day}")
async def test_preview_fires_the_rule_on_each_2027_transition_day(
    t: Transition, tmp_path: Path, cli_env: dict[str, str], no_scratch_left: None
) -> None:
    path = write_schedules_file(tmp_path, SCHEDULES.format(zone=t.zone))
    start, end = t.day_window()
    document = await preview_json(cli_env, path, start, end)
    by_id = {s["id"]: s for s in document["schedules"]}
    assert list(by_id) == ["daily-0130", "daily-0230", "half-hourly"]

    def fired(sid: str) -> list[datetime]:
        return [
            datetime.fromisoformat(s["utc"].replace("Z", "+00:00")) for s in by_id[sid]["slots"]
        ]

    walls = {"daily-0130": [time(1, 30)], "daily-0230": [time(2, 30)], "half-hourly": HALF_HOURS}
    expected = {
        "daily-0130": t.rule(walls["daily-0130"], each=False),
        "daily-0230": t.rule(walls["daily-0230"], each=False),
        "half-hourly": t.rule(walls["half-hourly"], each=True),
    }
    first, second = SPELLED_OUT[(t.zone, t.day)]
    assert expected["daily-0130"] == spelled(t, first)
    assert expected["daily-0230"] == spelled(t, second)
    for sid, instants in expected.items():
        assert fired(sid) == [i for i in instants if start <= i < end], sid
    # Every 30 minutes of wall time fires every 30 minutes of real time, the day's 23, 24.5 or
    # 25 hours long: a gap's wall times fire at its end, a repeat's at each reading.
    length = (end - start) // timedelta(minutes=30)
    assert fired("half-hourly") == [start + k * timedelta(minutes=30) for k in range(length)]

    for sid, schedule in by_id.items():
        assert schedule["timezone"] == t.zone
        for slot in schedule["slots"]:
            instant = datetime.fromisoformat(slot["utc"].replace("Z", "+00:00"))
            assert slot["logical_key"] == f"{sid}@{slot['utc']}"
            # The local column is the instant at the offset in force then.
            offset = t.before if instant < t.instant else t.after
            local = datetime.fromisoformat(slot["local"].split(" ")[0])
            assert local.utcoffset() == offset
            assert local.replace(tzinfo=None) == (instant + offset).replace(tzinfo=None)
            # A note exactly where the rule applied: the end of a gap that swallowed one of
            # the schedule's wall times, or a wall time read twice.
            wall = (instant + offset).replace(tzinfo=None)
            in_gap = any(not t.readings(datetime.combine(t.day, w)) for w in walls[sid])
            moved = instant == t.instant and in_gap
            repeated = len(t.readings(wall)) == 2
            assert (slot["note"] is not None) == (moved or repeated), (sid, slot)


async def test_the_json_shape_and_a_utc_schedule(
    tmp_path: Path, cli_env: dict[str, str], no_scratch_left: None
) -> None:
    path = write_schedules_file(
        tmp_path,
        """\
        schedules:
          - id: utc-daily
            job: probe
            cron: "30 2 * * *"
          - id: berlin-daily
            job: probe
            cron: "30 2 * * *"
            timezone: Europe/Berlin
        """,
    )
    start, end = datetime(2027, 3, 27, tzinfo=UTC), datetime(2027, 3, 29, tzinfo=UTC)
    document = await preview_json(cli_env, path, start, end)
    assert document == {
        "schedules": [
            {
                "id": "utc-daily",
                "timezone": "UTC",
                "slots": [
                    {
                        "utc": "2027-03-27T02:30:00Z",
                        "local": "2027-03-27T02:30:00Z",
                        "logical_key": "utc-daily@2027-03-27T02:30:00Z",
                        "note": None,
                    },
                    {
                        "utc": "2027-03-28T02:30:00Z",
                        "local": "2027-03-28T02:30:00Z",
                        "logical_key": "utc-daily@2027-03-28T02:30:00Z",
                        "note": None,
                    },
                ],
            },
            {
                "id": "berlin-daily",
                "timezone": "Europe/Berlin",
                "slots": [
                    {
                        "utc": "2027-03-27T01:30:00Z",
                        "local": "2027-03-27T02:30:00+01:00 CET",
                        "logical_key": "berlin-daily@2027-03-27T01:30:00Z",
                        "note": None,
                    },
                    {
                        "utc": "2027-03-28T01:00:00Z",
                        "local": "2027-03-28T03:00:00+02:00 CEST",
                        "logical_key": "berlin-daily@2027-03-28T01:00:00Z",
                        "note": document["schedules"][1]["slots"][1]["note"],
                    },
                ],
            },
        ]
    }
    note = document["schedules"][1]["slots"][1]["note"]
    assert "02:30" in note and "2027-03-28" in note and "end of the gap" in note

    # --id: only that schedule; the text form: a heading, then one line per slot.
    text = await cli(
        cli_env,
        "schedules",
        "preview",
        str(path),
        "--id",
        "berlin-daily",
        "--from",
        z(start),
        "--to",
        z(end),
    )
    assert text.code == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith("berlin-daily (Europe/Berlin): 2 slots")
    assert lines[2].split()[:3] == [
        "2027-03-28T01:00:00Z",
        "2027-03-28T03:00:00+02:00",
        "CEST",
    ]
    assert "berlin-daily@2027-03-28T01:00:00Z" in lines[2] and note in lines[2]


async def test_the_window_is_start_inclusive_end_exclusive_and_the_spec_bounds_count(
    tmp_path: Path, cli_env: dict[str, str], no_scratch_left: None
) -> None:
    """A slot at exactly --from is listed, one at exactly --to is not (Temporal's own list is
    the other way round); start_at and end_at (both inclusive) and a local exclusion are
    Temporal's to apply, and the preview shows what it does."""
    path = write_schedules_file(
        tmp_path,
        """\
        schedules:
          - id: ny-daily
            job: probe
            cron: "30 1 * * *"
            timezone: America/New_York
            start_at: 2027-03-02T06:30:00Z
            end_at: 2027-03-06T06:30:00Z
            exclude:
              - 2027-03-04
        """,
    )
    start, end = datetime(2027, 3, 3, 6, 30, tzinfo=UTC), datetime(2027, 3, 10, 6, 30, tzinfo=UTC)
    slots = (await preview_json(cli_env, path, start, end))["schedules"][0]["slots"]
    assert [s["utc"] for s in slots] == [
        "2027-03-03T06:30:00Z",
        "2027-03-05T06:30:00Z",
        "2027-03-06T06:30:00Z",
    ]
    before = await preview_json(cli_env, path, start - timedelta(days=2), start)
    assert [s["utc"] for s in before["schedules"][0]["slots"]] == ["2027-03-02T06:30:00Z"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--from", "2027-03-14T00:00:00", "--to", "2027-03-15T00:00:00Z"], "has no time zone"),
        (["--from", "2027-03-14T00:00:00Z", "--to", "next tuesday"], "is not a time"),
        (["--from", "2027-03-15T00:00:00Z", "--to", "2027-03-15T00:00:00Z"], "is not after"),
        (["--from", "2027-03-15T00:00:00Z", "--to", "2027-03-14T00:00:00Z"], "is not after"),
        (
            ["--id", "nightly", "--from", "2027-03-14T00:00:00Z", "--to", "2027-03-15T00:00:00Z"],
            "no schedule 'nightly'",
        ),
        # 30-minute slots for 300 days: 14,400 (refused by the rule before anything is written)
        (
            ["--id", "ny", "--from", "2027-01-01T00:00:00Z", "--to", "2027-10-28T00:00:00Z"],
            "10,000",
        ),
        # Minutely for 7 days: 10,080 (a UTC schedule: counted from Temporal's own pages)
        (
            ["--id", "utc", "--from", "2027-01-01T00:00:00Z", "--to", "2027-01-08T00:00:00Z"],
            "10,000",
        ),
    ],
)
async def test_bad_input_is_one_sentence_and_exit_2(
    args: list[str], said: str, tmp_path: Path, cli_env: dict[str, str], no_scratch_left: None
) -> None:
    path = write_schedules_file(
        tmp_path,
        """\
        schedules:
          - id: ny
            job: probe
            cron: "*/30 * * * *"
            timezone: America/New_York
          - id: utc
            job: probe
            every: 1m
        """,
    )
    result = await cli(cli_env, "schedules", "preview", str(path), *args)
    assert result.code == 2, result
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and said in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


async def test_unreachable_temporal_is_one_sentence_and_exit_1(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    path = write_schedules_file(
        tmp_path, "schedules:\n  - id: ny\n    job: probe\n    cron: '30 1 * * *'\n"
    )
    env = {**cli_env, "CRONWARDEN_TEMPORAL_ADDRESS": "127.0.0.1:1"}
    result = await cli(
        env,
        "schedules",
        "preview",
        str(path),
        "--from",
        "2027-03-14T00:00:00Z",
        "--to",
        "2027-03-15T00:00:00Z",
    )
    assert result.code == 1
    assert result.stderr.strip().startswith("error: cannot reach Temporal at 127.0.0.1:1")
    assert len(result.stderr.strip().splitlines()) == 1


async def test_a_year_of_0130_and_0230_in_new_york_is_the_docs_example(
    tmp_path: Path, cli_env: dict[str, str], no_scratch_left: None
) -> None:
    """docs/time-zones.md shows 2027 of a daily 01:30 and 02:30 in New York as runs of days
    that fire alike, and the two days that differ: each row it shows is what preview gives."""
    path = write_schedules_file(
        tmp_path,
        """\
        timezone: America/New_York
        schedules:
          - id: ny-0130
            job: probe
            cron: "30 1 * * *"
          - id: ny-0230
            job: probe
            cron: "30 2 * * *"
        """,
    )
    start, end = datetime(2027, 1, 1, 5, tzinfo=UTC), datetime(2028, 1, 1, 5, tzinfo=UTC)
    first, second = (await preview_json(cli_env, path, start, end))["schedules"]
    assert len(first["slots"]) == len(second["slots"]) == 365

    def cell(slot: dict[str, Any]) -> str:
        local, abbreviation = slot["local"].split(" ")
        return f"{slot['utc'][11:16]}Z, {local[11:16]} {abbreviation}"

    days = [
        (a["local"][5:10], cell(a), cell(b), a["note"], b["note"])
        for a, b in zip(first["slots"], second["slots"], strict=True)
    ]
    docs = (REPO_ROOT / "docs" / "time-zones.md").read_text()
    noted = [d for d in days if d[3] or d[4]]
    assert [d[0] for d in noted] == ["03-14", "11-07"]
    for day, at_0130, at_0230, note_0130, note_0230 in noted:
        # The day's row: the noted fire in bold with the rule's words, the other as it is.
        row = next(line for line in docs.splitlines() if line.startswith(f"| **{day}**"))
        for text, note in ((at_0130, note_0130), (at_0230, note_0230)):
            assert (f"**{text}**" if note else text) in row, (row, text)
        # The excerpt of preview's own lines carries the rule's note word for word.
        assert f"({note_0130 or note_0230})" in docs
    runs: list[list[tuple[str, str, str, Any, Any]]] = []
    for d in days:
        if runs and not (d[3] or d[4]) and runs[-1][-1][1:] == d[1:]:
            runs[-1].append(d)
        else:
            runs.append([d])
    for run in runs:
        (day, at_0130, at_0230, note_0130, note_0230) = run[0]
        if note_0130 or note_0230:
            continue
        row = f"| {day} to {run[-1][0]} ({len(run)} days) | {at_0130} | {at_0230} |"
        assert row in docs, row
    assert len(runs) == 5


async def test_the_first_and_last_days_temporal_s_calendar_takes_preview_alike(
    tmp_path: Path, cli_env: dict[str, str], no_scratch_left: None
) -> None:
    """A zoned schedule is compiled for the whole years around the window; at the edges of
    Temporal's years (2000 to 2100) the window is still listed, and past them it is refused
    as input, never sent for Temporal to refuse."""
    path = write_schedules_file(
        tmp_path,
        """\
        timezone: America/New_York
        schedules:
          - id: ny
            job: probe
            cron: "30 1 * * *"
        """,
    )
    # 01:30 EST is 06:30Z in both Januaries and Decembers.
    for start, end, expected in [
        ("2000-01-02T00:00:00Z", "2000-01-04T00:00:00Z", ["2000-01-02", "2000-01-03"]),
        ("2100-12-28T00:00:00Z", "2100-12-30T00:00:00Z", ["2100-12-28", "2100-12-29"]),
    ]:
        document = await preview_json(
            cli_env, path, datetime.fromisoformat(start), datetime.fromisoformat(end)
        )
        utcs = [s["utc"] for s in document["schedules"][0]["slots"]]
        assert utcs == [f"{day}T06:30:00Z" for day in expected]
    result = await cli(
        cli_env,
        "schedules",
        "preview",
        str(path),
        "--from",
        "2100-12-29T00:00:00Z",
        "--to",
        "2100-12-31T00:00:00Z",
    )
    assert result.code == 2, result
    assert "the years 2000 to 2100" in result.stderr


async def test_a_zoned_interval_fires_real_time_but_the_hours_its_exclusion_names(
    tmp_path: Path, cli_env: dict[str, str], no_scratch_left: None
) -> None:
    """`every: 30m` in New York on 2027-11-07 (25 hours): every 30 minutes of real time, but
    for the four whose wall clock reads 01:xx, EDT (05:00Z, 05:30Z) and EST (06:00Z, 06:30Z)."""
    path = write_schedules_file(
        tmp_path,
        """\
        schedules:
          - id: ny-every
            job: probe
            every: 30m
            timezone: America/New_York
            exclude:
              - {hour: 1}
        """,
    )
    start = datetime(2027, 11, 7, 4, tzinfo=UTC)  # 00:00 EDT
    end = datetime(2027, 11, 8, 5, tzinfo=UTC)  # 00:00 EST the next day
    (schedule,) = (await preview_json(cli_env, path, start, end))["schedules"]
    ones = {datetime(2027, 11, 7, h, m, tzinfo=UTC) for h in (5, 6) for m in (0, 30)}
    expected = [start + k * timedelta(minutes=30) for k in range(50)]
    assert [s["utc"] for s in schedule["slots"]] == [z(t) for t in expected if t not in ones]
    assert {s["note"] for s in schedule["slots"]} == {None}
    assert schedule["slots"][2]["local"] == "2027-11-07T02:00:00-05:00 EST"
