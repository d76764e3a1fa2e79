"""`backfill` and `audit` output written as it is formatted: the same text as before, for
windows of any size, without a Python object per key held at once."""

from __future__ import annotations

import io
import json
from array import array
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from cronwarden.activities.contract import logical_key
from cronwarden.backfill.audit import Audit
from cronwarden.backfill.json_stream import dump
from cronwarden.backfill.plan import FireTimes, Plan, keys_of
from cronwarden.backfill.replay import HISTORY, RunDefinition
from cronwarden.backfill.window import Window
from cronwarden.cli import backfill as backfill_cli
from cronwarden.cli import support as cli_support
from cronwarden.schedules.run_ids import REPLAY_INFIX, replay_workflow_id

START = datetime(2026, 11, 29, 23, 58, tzinfo=UTC)
WINDOW = Window(START, START + timedelta(minutes=10))


def _seconds(*minutes: int) -> list[int]:
    return [int((START + timedelta(minutes=m)).timestamp()) for m in minutes]


def _dumped(value: Any) -> str:
    text = io.StringIO()
    dump(value, text.write)
    return text.getvalue()


@pytest.mark.parametrize(
    "value",
    [
        {},
        {"keys": []},
        {"keys": ["only-é"]},
        {"keys": [f"k{i}" for i in range(20_000)], "n": 3, "f": 1.5, "none": None, "t": True},
        {"nested": {"empty": {}, "list": [[], [1, {"a": "b"}]], "s": 'q"uote\n'}},
        [],
        "bare",
    ],
)
def test_a_document_is_written_exactly_as_json_dumps_writes_it(value: Any) -> None:
    expected = json.dumps(value, indent=2, ensure_ascii=False) + "\n"
    assert _dumped(value) == expected
    if isinstance(value, dict):
        # The same document with its lists handed over as iterators.
        lazy = {k: iter(v) if isinstance(v, list) else v for k, v in value.items()}
        assert _dumped(lazy) == expected


def test_an_iterator_is_written_while_it_is_consumed() -> None:
    written: list[str] = []
    produced = 0

    def keys() -> Iterator[str]:
        nonlocal produced
        for i in range(50_000):
            produced = i + 1
            yield f"key-{i}"
        # Output began long before the last key existed: nothing held them all.
        assert written and '"keys": [' in written[0]

    dump({"count": 50_000, "keys": keys()}, written.append)
    assert produced == 50_000
    assert len(written) > 1
    assert json.loads("".join(written))["keys"][-1] == "key-49999"


def test_keys_are_the_logical_keys_and_replay_ids_of_the_times() -> None:
    times = [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(999, 12, 31, 23, 59, 59, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC),
        datetime(1970, 1, 1, tzinfo=UTC),
        *(START + timedelta(seconds=37 * i) for i in range(200)),
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
    ]
    seconds = [int(t.timestamp()) for t in times]
    assert list(keys_of("s", seconds)) == [logical_key("s", t) for t in times]
    assert list(keys_of("s", seconds, prefix=f"s{REPLAY_INFIX}")) == [
        replay_workflow_id("s", t) for t in times
    ]


def test_fire_times_hold_seconds_and_answer_as_datetimes() -> None:
    held = FireTimes(_seconds(0, 2, 4))
    assert len(held) == 3
    assert list(held) == [START, START + timedelta(minutes=2), START + timedelta(minutes=4)]
    assert START + timedelta(minutes=2) in held
    assert START + timedelta(minutes=1) not in held
    assert START.replace(tzinfo=None) not in held
    assert list(held.keys("s")) == [logical_key("s", t) for t in held]


@pytest.fixture
def printed(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    text = io.StringIO()
    monkeypatch.setattr(cli_support.out, "file", text)
    return text


RECORDED = RunDefinition(HISTORY, cast(Any, None), None, START - timedelta(days=1), "digest-v1")


class _Chooser:
    """A `Definitions` whose history covers every minute but the sixth."""

    def resolve(self, fire_time: datetime) -> RunDefinition | str:
        if fire_time.minute == 6:
            return "no recorded definition covers this time"
        return RECORDED


@pytest.mark.parametrize("minutes", [(), (0,), (0, 2, 4, 6)])
def test_plan_and_dry_run_json_keep_their_documents(
    printed: io.StringIO, minutes: tuple[int, ...]
) -> None:
    p = Plan(
        "s", WINDOW, expected=11, done=11 - len(minutes), missing=array("q", _seconds(*minutes))
    )
    keys = [logical_key("s", t) for t in p.missing_times()]
    plan = p.counts_json() | {"missing_keys": keys}
    backfill_cli._print_json(backfill_cli.plan_json(p))
    backfill_cli._print_dry_run(p, True, None, _Chooser())
    ids = [replay_workflow_id("s", t) for t in p.missing_times()]
    times = list(p.missing_times())
    run = [t for t in times if t.minute != 6]
    definitions = [RECORDED.as_json() | {"keys": len(run)}] if run else []
    skipped = [
        {"logical_key": logical_key("s", t), "reason": "no recorded definition covers this time"}
        for t in times
        if t.minute == 6
    ]
    dry = plan | {
        "dry_run": True,
        "workflow_ids": ids,
        "definitions": definitions,
        "skipped": skipped,
    }
    assert printed.getvalue() == "".join(
        json.dumps(d, indent=2, ensure_ascii=False) + "\n" for d in (plan, dry)
    )


def test_audit_text_lists_running_missing_and_lease_skipped_keys(printed: io.StringIO) -> None:
    in_flight, missing = _seconds(0), _seconds(2, 4)
    skipped = logical_key("s", START + timedelta(minutes=4))
    result = Audit(
        schedule_id="s",
        window=WINDOW,
        expected=11,
        committed=8,
        committed_off_spec=1,
        in_flight=FireTimes(in_flight),
        missing=FireTimes(missing),
        actions_total=3,
        skipped_overlap_total=1,
        missed_catchup_window_total=2,
        paused=True,
        lease_skips_total=2,
        last_lease_skip={"logical_key": skipped, "holder": "h", "at": "t"},
    )
    backfill_cli._print_audit(result)
    assert printed.getvalue().splitlines() == [
        "s: window 2026-11-29T23:58:00Z .. 2026-11-30T00:08:00Z",
        "should have run 11: committed 8, running 1, missing 2",
        "committed at other times (manual triggers): 1",
        "Temporal, since the schedule was created: 3 actions, 1 skipped (overlap), "
        "2 missed (catchup window), paused",
        "skipped at the lease (a shared lock's other holder, a stale holder): 2, last "
        f"{skipped} held by h",
        "  running s@2026-11-29T23:58:00Z",
        "  missing s@2026-11-30T00:00:00Z",
        f"  skipped {skipped} (lease held by h)",
    ]
    data = json.loads(_dumped(result.as_json()))
    assert data["missing_keys"] == ["s@2026-11-30T00:00:00Z", skipped]
    assert data["in_flight_keys"] == ["s@2026-11-29T23:58:00Z"]
    assert data["skipped_lease_keys"] == [skipped]
