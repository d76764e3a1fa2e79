"""The soak's verdict: each way of losing or doubling a fire fails it on its own, and a live
fire counts as lost to a replay only when a replay of the key that held its lease was running."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.soak.faults import backfill_summary
from tests.soak.ledger import ScheduleLedger, not_paused, render
from tests.soak.runs import Run, lost_to_replays
from tests.support.cli import Result

T0 = datetime(2026, 11, 30, 4, tzinfo=UTC)
KEYS = {f"s@{i}" for i in range(4)}


def ledger(**fields: Any) -> ScheduleLedger:
    base: dict[str, Any] = {
        "name": "s",
        "overlap": "skip",
        "due": set(KEYS),
        "committed": {"s@0", "s@1", "s@2"},
        "listed": {"s@3"},
        "duplicate_effects": 0,
        "unrecorded_effects": 0,
        "lost_to_replays": [],
        "left": set(),
    }
    base.update(fields)
    return ScheduleLedger(**base)


def test_a_schedule_whose_missing_fires_are_all_listed_passes() -> None:
    assert ledger().verdict == "pass"
    assert ledger().failures == []


@pytest.mark.parametrize(
    ("fields", "failure"),
    [
        ({"listed": set()}, "1 due, never committed and not listed"),
        ({"duplicate_effects": 1}, "1 duplicate effects"),
        ({"unrecorded_effects": 2}, "2 effects without an outbox record"),
        ({"lost_to_replays": ["s-live"]}, "1 live fires lost to replays"),
        ({"left": {"s@3"}}, "1 keys left after backfill run"),
    ],
)
def test_each_loss_or_double_application_fails_the_verdict(
    fields: dict[str, Any], failure: str
) -> None:
    row = ledger(**fields)
    assert row.verdict == "FAIL"
    assert row.failures == [failure]
    assert render([row]).splitlines()[-1].rstrip(" |").endswith("FAIL")


def test_fires_inside_an_operator_pause_are_not_due() -> None:
    times = [T0 + timedelta(seconds=s) for s in range(0, 10, 2)]
    pause = (T0 + timedelta(seconds=1), T0 + timedelta(seconds=5))
    assert not_paused(times, [pause]) == [times[0], times[3], times[4]]


def run(key: str, start: int, end: int | None, *, replay: bool = False, **fields: Any) -> Run:
    return Run(
        workflow_id=f"{'replay' if replay else 'live'}:{key}",
        schedule_id="s",
        logical_key=key,
        replay=replay,
        started=T0 + timedelta(seconds=start),
        closed=None if end is None else T0 + timedelta(seconds=end),
        status="completed" if "error" not in fields else "failed",
        **fields,
    )


REPLAY = run("s@old", 10, 20, replay=True, outcome="ran")


def test_a_live_fire_skipped_while_a_replay_held_its_lease_is_lost_to_it() -> None:
    live = run("s@new", 12, 13, outcome="overlap-locked", held_by="s@old")
    assert lost_to_replays([REPLAY, live]) == [live]


def test_a_buffer_one_fire_that_timed_out_behind_a_replay_is_lost_to_it() -> None:
    live = run("s@new", 12, 19, held_by="s@old", error="the lease stayed held by s@old ...")
    assert lost_to_replays([REPLAY, live]) == [live]


def test_a_still_running_replay_counts_as_holding_until_now() -> None:
    running = run("s@old", 10, None, replay=True)
    live = run("s@new", 40, 41, outcome="overlap-locked", held_by="s@old")
    assert lost_to_replays([running, live]) == [live]


@pytest.mark.parametrize(
    "live",
    [
        # Held by another schedule sharing the lock, not by a replay: a lease skip.
        run("s@new", 12, 13, outcome="overlap-locked", held_by="peer@x"),
        # The replay of that key had ended before this fire started: another holder.
        run("s@new", 30, 31, outcome="overlap-locked", held_by="s@old"),
        # The replay was of this very key: the key is applied, nothing lost.
        run("s@old", 12, 13, outcome="overlap-locked", held_by="s@old"),
        # Waited behind the replay, then ran.
        run("s@new", 12, 22, outcome="ran"),
    ],
)
def test_a_live_fire_that_did_not_lose_to_a_replay_is_not_counted(live: Run) -> None:
    assert lost_to_replays([REPLAY, live]) == []


def test_a_replay_skipped_behind_another_replay_is_no_live_loss() -> None:
    other = run("s@older", 12, 13, replay=True, outcome="overlap-locked", held_by="s@old")
    assert lost_to_replays([REPLAY, other]) == []


def test_a_backfill_summary_is_read_past_the_temporal_cores_retry_lines_on_stdout() -> None:
    stdout = (
        "2026-11-30T21:48:00Z  WARN temporalio_client::retry: gRPC call retried 5 times {x}\n"
        '{\n  "summary": {"replayed": 1, "failed": 1},\n'
        '  "failed": [{"logical_key": "s@1", "error": "Temporal refused the replay"}]\n}\n'
    )
    summary = backfill_summary(Result(1, stdout, ""))
    assert summary == "replayed 1, failed 1; failed s@1: Temporal refused the replay"
    assert backfill_summary(Result(1, "", "error: cannot reach Temporal")) == (
        "no summary printed: error: cannot reach Temporal"
    )
