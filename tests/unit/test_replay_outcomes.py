from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from cronwarden.activities.contract import ALREADY_DONE, OVERLAP_LOCKED, RAN, RunOutcome
from cronwarden.backfill.replay import FAILED, REPLAYED, ReplayResult, Summary, _classify
from cronwarden.schedules.run_ids import replay_workflow_id, scheduled_fire_time

KEY = "nightly@2026-11-30T04:00:00Z"
WID = "nightly~replay-2026-11-30T04:00:00Z"


# Temporal's scheduled run id: a schedule id (`[a-z0-9][a-z0-9-]{0,62}`), `-`, the fire time.
SCHEDULED_RUN_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


@pytest.mark.parametrize("schedule_id", ["nightly", "nightly-replay", "a", "x" * 63, "a-b-9"])
def test_a_replay_id_is_never_a_scheduled_run_id_of_any_schedule(schedule_id: str) -> None:
    fire = datetime(2026, 11, 30, 4, tzinfo=UTC)
    replay_id = replay_workflow_id(schedule_id, fire)
    assert SCHEDULED_RUN_ID.fullmatch(replay_id) is None
    # In particular not the run of the schedule whose id extends this one (`X-replay` at T was
    # the old replay id of `X` at T), nor this schedule's own run at that time.
    assert scheduled_fire_time(f"{schedule_id}-replay", replay_id) is None
    assert scheduled_fire_time(schedule_id, replay_id) is None
    assert replay_id != f"{schedule_id}-replay-{fire:%Y-%m-%dT%H:%M:%SZ}"


def test_a_replay_id_names_its_schedule_and_fire_time() -> None:
    fire = datetime(2026, 11, 30, 4, tzinfo=UTC)
    assert replay_workflow_id("nightly", fire) == WID


def test_a_run_we_started_that_ran_is_replayed_but_one_we_attached_to_is_already_done() -> None:
    ran = RunOutcome(RAN, KEY)
    assert _classify(KEY, WID, ran, attached=False).outcome == REPLAYED
    attached = _classify(KEY, WID, ran, attached=True)
    assert (attached.outcome, attached.detail) == (ALREADY_DONE, "replayed by a concurrent run")


def test_done_and_locked_outcomes_keep_their_reason() -> None:
    done = RunOutcome(ALREADY_DONE, KEY, args_mismatch=True, notes=["other args"])
    assert _classify(KEY, WID, done, attached=False).detail == "other args"
    locked = RunOutcome(OVERLAP_LOCKED, KEY, held_by="nightly@2026-11-30T03:59:00Z")
    result = _classify(KEY, WID, locked, attached=False)
    assert (result.outcome, result.detail) == (
        OVERLAP_LOCKED,
        "lease held by nightly@2026-11-30T03:59:00Z",
    )


def test_the_summary_counts_every_outcome_and_keeps_the_failures() -> None:
    summary = Summary()
    for outcome in (REPLAYED, REPLAYED, ALREADY_DONE, FAILED):
        summary.add(ReplayResult(KEY, WID, outcome, "boom" if outcome == FAILED else None))
    assert summary.counts == {REPLAYED: 2, ALREADY_DONE: 1, OVERLAP_LOCKED: 0, FAILED: 1}
    assert [f.detail for f in summary.failures] == ["boom"]
