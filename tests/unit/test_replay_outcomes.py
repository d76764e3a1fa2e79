from __future__ import annotations

from datetime import UTC, datetime

from activities.contract import ALREADY_DONE, OVERLAP_LOCKED, RAN, RunOutcome
from schedules.replay import (
    FAILED,
    REPLAYED,
    ReplayResult,
    Summary,
    _classify,
    replay_workflow_id,
)

KEY = "nightly@2026-11-30T04:00:00Z"
WID = "nightly-replay-2026-11-30T04:00:00Z"


def test_a_replay_id_never_takes_the_form_of_the_schedules_own_ids() -> None:
    fire = datetime(2026, 11, 30, 4, tzinfo=UTC)
    assert replay_workflow_id("nightly", fire) == WID
    # Temporal names scheduled runs `{id}-{time}`: a replay must never collide with one.
    assert replay_workflow_id("nightly", fire) != f"nightly-{fire:%Y-%m-%dT%H:%M:%SZ}"


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
