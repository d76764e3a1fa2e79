"""The duplicate-schedule guard: same job, trigger and args twice is refused with both ids."""

from __future__ import annotations

import textwrap

import pytest

from cronwarden.activities.jobs import JobContext, JobRegistry, JobResult, JobSpec
from cronwarden.errors import ScheduleFileError
from cronwarden.schedules.duplicates import duplicates_of_existing
from cronwarden.schedules.mapping import definition_digest, definition_json
from cronwarden.schedules.model import ScheduleDefinition, parse_schedule_text


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


def test_a_cron_and_a_list_of_the_same_crons_in_another_order_are_one_trigger(
    registry: JobRegistry,
) -> None:
    with pytest.raises(ScheduleFileError) as caught:
        parse(
            """
            schedules:
              - {id: one, job: reconcile, cron: ["0 9 * * *", "0 17 * * *"]}
              - {id: two, job: reconcile, cron: ["0 17 * * *", "0  9 * * *"]}
              - {id: three, job: reconcile, cron: "0 12 * * *"}
              - {id: four, job: reconcile, cron: ["0 12 * * *"], jitter: 30s}
            """,
            registry,
        )
    message = str(caught.value)
    assert "schedules 'one' and 'two' duplicate each other" in message
    # Jitter moves the start, not the slot: still the same work.
    assert "schedules 'four' and 'three' duplicate each other" in message


def test_a_hand_over_between_periods_is_not_a_duplicate_but_an_overlap_is(
    registry: JobRegistry,
) -> None:
    handover = """
        schedules:
          - {id: old, job: reconcile, cron: "0 9 * * *", end_at: "2030-01-01T00:00:00Z"}
          - {id: new, job: reconcile, cron: "0 9 * * *", start_at: "2030-01-01T00:00:01Z"}
        """
    assert [d.id for d in parse(handover, registry)] == ["old", "new"]
    # Temporal fires at exactly end_at, so sharing that instant is an overlap.
    with pytest.raises(ScheduleFileError, match="'new' and 'old' duplicate each other"):
        parse(handover.replace("00:00:01Z", "00:00:00Z"), registry)

    existing = {
        "old": definition_json(parse(handover, registry)[0], task_queue="q"),
    }
    later = ScheduleDefinition.model_validate(
        {"id": "n", "job": "reconcile", "cron": "0 9 * * *", "start_at": "2031-01-01T00:00:00Z"}
    )
    assert duplicates_of_existing([later], existing) == []
    unbounded = ScheduleDefinition.model_validate(
        {"id": "u", "job": "reconcile", "cron": ["0 9 * * *"]}
    )
    assert "schedule 'u' duplicates the existing schedule(s) 'old'" in " ".join(
        duplicates_of_existing([unbounded], existing)
    )
