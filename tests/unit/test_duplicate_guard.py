"""The duplicate-schedule guard: same job, trigger and args twice is refused with both ids."""

from __future__ import annotations

import textwrap

import pytest

from activities.jobs import JobContext, JobRegistry, JobResult, JobSpec
from cronwarden.errors import ScheduleFileError
from schedules.duplicates import duplicates_of_existing
from schedules.mapping import definition_digest, definition_json
from schedules.model import ScheduleDefinition, parse_schedule_text


async def _noop(ctx: JobContext) -> JobResult:
    return None


@pytest.fixture
def registry() -> JobRegistry:
    jobs = JobRegistry()
    jobs.register(JobSpec(name="reconcile", func=_noop, read_only=False, args_model=None))
    return jobs


def parse(text: str, registry: JobRegistry) -> list[ScheduleDefinition]:
    return parse_schedule_text(textwrap.dedent(text), registry)


def define(schedule_id: str) -> ScheduleDefinition:
    return ScheduleDefinition.model_validate(
        {"id": schedule_id, "job": "reconcile", "every": "15m"}
    )


def test_two_entries_with_the_same_job_trigger_and_args_are_refused_naming_both(
    registry: JobRegistry,
) -> None:
    with pytest.raises(ScheduleFileError) as caught:
        parse(
            """
            schedules:
              - {id: nightly, job: reconcile, cron: "0 2 * * *", args: {a: 1, b: 2}}
              - {id: nightly-copy, job: reconcile, cron: "0 2 * * *", args: {b: 2, a: 1}}
              - {id: later, job: reconcile, cron: "0 3 * * *", args: {a: 1, b: 2}}
            """,
            registry,
        )
    (problem,) = caught.value.problems
    assert "'nightly' and 'nightly-copy' duplicate each other" in problem
    assert "allow_duplicate" in problem
    assert "later" not in problem


def test_other_args_or_another_trigger_are_not_duplicates(registry: JobRegistry) -> None:
    defs = parse(
        """
        schedules:
          - {id: a, job: reconcile, every: 15m, args: {region: eu}}
          - {id: b, job: reconcile, every: 15m, args: {region: us}}
          - {id: c, job: reconcile, every: 30m, args: {region: eu}}
        """,
        registry,
    )
    assert [d.id for d in defs] == ["a", "b", "c"]


def test_allow_duplicate_opts_an_entry_out(registry: JobRegistry) -> None:
    defs = parse(
        """
        schedules:
          - {id: a, job: reconcile, every: 15m}
          - {id: b, job: reconcile, every: 15m, allow_duplicate: true}
        """,
        registry,
    )
    assert [d.id for d in defs] == ["a", "b"]


def test_a_new_schedule_duplicating_an_existing_one_names_the_existing_id(
    registry: JobRegistry,
) -> None:
    old = define("old")
    new = define("new")
    existing = {"old": definition_json(old, task_queue="q")}
    (problem,) = duplicates_of_existing([new], existing)
    assert "'new' duplicates the existing schedule(s) 'old'" in problem
    allowed = new.model_copy(update={"allow_duplicate": True})
    assert duplicates_of_existing([allowed], existing) == []


def test_allow_duplicate_is_not_a_change_to_the_schedule() -> None:
    plain = define("a")
    allowed = plain.model_copy(update={"allow_duplicate": True})
    assert definition_digest(plain, task_queue="q") == definition_digest(allowed, task_queue="q")
