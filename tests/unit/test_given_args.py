"""Args given on the command line (`trigger --args`, `backfill run --args-file`): read and checked
before anything starts, and a replay's args conflict counted and shown."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from pydantic import BaseModel

from cronwarden.activities.contract import ALREADY_DONE, RunOutcome
from cronwarden.activities.jobs import JobRegistry, JobSpec
from cronwarden.backfill.replay import CURRENT, ReplayResult, RunDefinition, Summary, _classify
from cronwarden.cli import backfill as backfill_cli
from cronwarden.cli import support as cli_support
from cronwarden.errors import InvalidInput
from cronwarden.schedules.model import ScheduleDefinition, args_digest
from cronwarden.schedules.overridden_args import (
    MAX_ARGS_BYTES,
    check_for_job,
    parse_args_text,
    read_args_file,
)
from cronwarden.workflows.scheduled_run import ScheduledRunInput

KEY = "nightly@2026-11-30T04:00:00Z"
WID = "nightly~replay-2026-11-30T04:00:00Z"


class Args(BaseModel):
    label: str


async def _noop(ctx: object) -> None:
    return None


def _registry() -> JobRegistry:
    registry = JobRegistry()
    registry.register(JobSpec("labelled", _noop, read_only=False, args_model=Args))
    return registry


def test_the_digest_of_given_args_is_the_one_a_schedule_file_gets() -> None:
    defn = ScheduleDefinition.model_validate(
        {"id": "nightly", "job": "labelled", "cron": "0 3 * * *", "args": {"b": 1, "a": [2]}}
    )
    given = parse_args_text('{"a": [2], "b": 1}')
    assert given.digest == args_digest({"b": 1, "a": [2]}) == defn.args_digest()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{", "--args is not JSON"),
        ("[]", "not an array"),
        ('"x"', "not a string"),
        ("null", "not null"),
        ("3", "not a number"),
        ("x" * (MAX_ARGS_BYTES + 1), "larger than 256 KiB"),
    ],
)
def test_text_that_is_not_a_json_object_is_refused(text: str, reason: str) -> None:
    with pytest.raises(InvalidInput, match="nothing started") as refused:
        parse_args_text(text)
    assert reason in str(refused.value)


def test_a_file_is_refused_when_missing_not_utf8_or_too_big(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="does not exist"):
        read_args_file(tmp_path / "missing.json")
    with pytest.raises(InvalidInput, match="is not a file"):
        read_args_file(tmp_path)
    latin = tmp_path / "latin1.json"
    latin.write_bytes(b'{"label": "caf\xe9"}')
    with pytest.raises(InvalidInput, match="is not UTF-8"):
        read_args_file(latin)
    big = tmp_path / "big.json"
    big.write_text('{"label": "' + "x" * MAX_ARGS_BYTES + '"}')
    with pytest.raises(InvalidInput, match="larger than 256 KiB"):
        read_args_file(big)
    good = tmp_path / "good.json"
    good.write_text('{"label": "café"}')
    assert read_args_file(good).args == {"label": "café"}


def test_args_are_checked_against_the_jobs_model_with_unknown_keys_refused() -> None:
    registry = _registry()
    check_for_job(parse_args_text('{"label": "x"}'), "labelled", registry)
    with pytest.raises(InvalidInput, match="label: Field required; nothing started"):
        check_for_job(parse_args_text("{}"), "labelled", registry)
    with pytest.raises(InvalidInput, match="lable: not an argument of this job"):
        check_for_job(parse_args_text('{"label": "x", "lable": "y"}'), "labelled", registry)
    with pytest.raises(InvalidInput, match="unknown job 'other'"):
        check_for_job(parse_args_text('{"label": "x"}'), "other", registry)
    with pytest.raises(InvalidInput, match="CRONWARDEN_JOBS is not set"):
        check_for_job(parse_args_text('{"label": "x"}'), "labelled", None)


def test_a_replay_done_with_other_args_is_a_conflict_counted_as_already_done() -> None:
    mismatch = RunOutcome(ALREADY_DONE, KEY, args_mismatch=True, notes=["other args"])
    result = _classify(KEY, WID, mismatch, attached=False)
    assert (result.outcome, result.args_mismatch) == (ALREADY_DONE, True)
    summary = Summary()
    summary.add(result)
    summary.add(ReplayResult(KEY, WID, ALREADY_DONE))
    assert summary.counts[ALREADY_DONE] == 2
    assert [c.logical_key for c in summary.conflicts] == [KEY]


def test_a_definition_with_given_args_runs_them_and_says_so() -> None:
    inp = ScheduledRunInput(schedule_id="nightly", job="labelled", args={"label": "a"})
    plain = RunDefinition(CURRENT, inp, None)
    given = parse_args_text('{"label": "b"}', source="args file b.json")
    with_args = plain.with_args(given)
    assert with_args.run_input.args == {"label": "b"}
    assert with_args.run_input.args_digest == given.digest
    assert inp.args == {"label": "a"}  # the definition's own input is left as it was
    assert plain.with_args(None) is plain and "args_from" not in plain.as_json()
    assert with_args.as_json()["args_from"] == "args file b.json"
    assert with_args.text() == (
        f"the current definition, with the args of args file b.json (args digest {given.digest})"
    )


def test_each_args_conflict_is_printed_with_its_key_and_json_lists_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = io.StringIO()
    monkeypatch.setattr(cli_support.out, "file", text)
    conflict = ReplayResult(KEY, WID, ALREADY_DONE, "other args", args_mismatch=True)
    backfill_cli._print_conflicts([conflict])
    assert text.getvalue().splitlines() == [
        "args conflicts 1: done with other args than the replay's, so reported and never run "
        "again (exit 1):",
        f"  args conflict {KEY}: other args",
    ]
    summary = Summary()
    summary.add(conflict)
    plan = cast(Any, SimpleNamespace(counts_json=dict))
    cap = cast(Any, SimpleNamespace(as_json=dict))
    assert backfill_cli._run_json(plan, cap, summary)["args_conflicts"] == [
        {"logical_key": KEY, "workflow_id": WID, "detail": "other args"}
    ]
    assert backfill_cli._run_json(plan, cap, None)["args_conflicts"] == []
