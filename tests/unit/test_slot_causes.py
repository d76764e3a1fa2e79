"""The rules that give a slot without a commit its cause, on plain values (backfill/causes.py).

The same rules are exercised for real in tests/integration/test_slot_causes.py."""

from __future__ import annotations

from datetime import UTC, datetime

from cronwarden.backfill.causes import (
    EXAMPLES,
    FAILED,
    MISSED_CATCHUP,
    NAMED,
    PAUSED_OPERATOR,
    PAUSED_TEMPORAL,
    SKIPPED_OVERLAP,
    UNKNOWN,
    Evidence,
    Run,
    judge,
    next_command,
    summarise,
)
from cronwarden.store.pause_history import Pause

T0 = 1_800_000_000  # an even second
SID = "nightly"


def at(s: int) -> datetime:
    return datetime.fromtimestamp(s, UTC)


def run(fire_s: int, *, closed: int | None, status: str = "completed", replay: bool = False) -> Run:
    return Run(
        fire_s=fire_s,
        workflow_id=f"{SID}-{fire_s}",
        run_id=None,
        replay=replay,
        started=at(fire_s),
        closed=None if closed is None else at(closed),
        status=status if closed is not None else "running",
    )


def test_a_slot_while_an_earlier_run_was_open_was_skipped_behind_it() -> None:
    evidence = Evidence(SID, "skip", [run(T0, closed=T0 + 5)])
    verdict = judge(evidence, T0 + 4)
    assert verdict.cause == SKIPPED_OVERLAP
    assert verdict.run == "nightly@2027-01-15T08:00:00Z"


def test_a_slot_after_the_run_closed_with_no_run_of_its_own_missed_the_catchup_window() -> None:
    evidence = Evidence(SID, "skip", [run(T0, closed=T0 + 5)])
    assert judge(evidence, T0 + 6).cause == MISSED_CATCHUP


def test_a_replay_never_makes_temporal_skip() -> None:
    evidence = Evidence(SID, "skip", [run(T0, closed=T0 + 5, replay=True)])
    assert judge(evidence, T0 + 2).cause == MISSED_CATCHUP


def test_allow_all_never_skips_for_overlap() -> None:
    evidence = Evidence(SID, "allow_all", [run(T0, closed=None)])
    assert judge(evidence, T0 + 2).cause == MISSED_CATCHUP


def test_after_a_failed_run_pause_on_failure_holds_the_next_slots() -> None:
    failed = run(T0, closed=T0 + 3, status="failed")
    evidence = Evidence(
        SID, "skip", [failed], paused_note="paused due to failure", paused_since=at(T0 + 3)
    )
    assert judge(evidence, T0).cause == FAILED
    assert judge(evidence, T0 + 2).cause == SKIPPED_OVERLAP
    assert judge(evidence, T0 + 4).cause == PAUSED_TEMPORAL


def test_a_slot_older_than_temporals_retention_is_unknown_not_a_catchup_miss() -> None:
    evidence = Evidence(SID, "skip", [], retained_from=at(T0 + 10))
    assert judge(evidence, T0).cause == UNKNOWN
    assert judge(evidence, T0 + 10).cause == MISSED_CATCHUP


def test_many_slots_are_counted_by_cause_and_only_a_bounded_number_kept() -> None:
    evidence = Evidence(SID, "skip", [run(T0, closed=T0 + 7)])
    missing = range(T0 + 1, T0 + 10_001)
    causes = summarise(evidence, missing)
    counts = {g.cause: g.count for g in causes.groups}
    assert counts == {SKIPPED_OVERLAP: 6, MISSED_CATCHUP: 9_994}
    assert len(causes.named) == NAMED
    assert all(len(g.examples) <= EXAMPLES for g in causes.groups)
    [catchup] = [g for g in causes.groups if g.cause == MISSED_CATCHUP]
    assert (catchup.first_s, catchup.last_s) == (T0 + 7, T0 + 10_000)


def test_fires_an_operator_held_say_the_reason_and_replay_only_with_include_held() -> None:
    pause = Pause(at(T0), at(T0 + 100), "db migration")
    causes = summarise(Evidence(SID, "skip", []), [], held=[T0 + 2, T0 + 4], pauses=[pause])
    [doc] = causes.as_json()
    assert doc["cause"] == PAUSED_OPERATOR
    assert doc["text"] == "paused by an operator: db migration"
    assert doc["next_command"] == next_command(SID, at(T0 + 2), at(T0 + 4), held=True)
    assert doc["next_command"].endswith("--end 2027-01-15T08:00:04Z --include-held")


def test_include_paused_only_while_the_schedule_is_paused() -> None:
    assert "--include-paused" not in next_command(SID, at(T0), at(T0))
    assert next_command(SID, at(T0), at(T0 + 3600), paused=True) == (
        "cronwarden backfill run nightly --start 2027-01-15T08:00:00Z "
        "--end 2027-01-15T09:00:00Z --include-paused"
    )


def test_a_run_temporal_says_is_running_but_visibility_does_not_list_yet_is_starting() -> None:
    causes = summarise(Evidence(SID, "skip", []), [], in_flight=[T0])
    [doc] = causes.as_json()
    assert (doc["cause"], doc["in_flight"], doc["next_command"]) == ("running", True, None)
