from __future__ import annotations

import textwrap
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from cronwarden.activities.jobs import JobContext, JobRegistry, JobResult, JobSpec
from cronwarden.errors import InvalidInput, ScheduleFileError
from cronwarden.schedules.model import (
    ALIAS_EXPANSION_LIMIT,
    MAX_FILE_BYTES,
    Overlap,
    ScheduleDefinition,
    load_schedule_file,
)


class ReconcileArgs(BaseModel):
    region: str


async def _noop(ctx: JobContext) -> JobResult:
    return None


@pytest.fixture
def registry() -> JobRegistry:
    jobs = JobRegistry()
    jobs.register(JobSpec(name="reconcile", func=_noop, read_only=False, args_model=ReconcileArgs))
    jobs.register(JobSpec(name="report", func=_noop, read_only=True, args_model=None))
    return jobs


WriteFile = Callable[[str], Path]


@pytest.fixture
def write_file(tmp_path: Path) -> WriteFile:
    def write(text: str) -> Path:
        path = tmp_path / "schedules.yaml"
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


def problems_in(path: Path, registry: JobRegistry) -> list[str]:
    with pytest.raises(ScheduleFileError) as exc_info:
        load_schedule_file(path, registry)
    assert exc_info.value.path == str(path)
    return exc_info.value.problems


def one_entry(fields: str) -> str:
    """A file holding one entry with id `s1`; `fields` are its other lines."""
    body = textwrap.indent(textwrap.dedent(fields).strip(), "    ")
    return f"schedules:\n  - id: s1\n{body}\n"


GOOD_FILE = """\
schedules:
  - id: nightly-reconcile
    job: reconcile
    cron: "0 2 * * *"
    overlap: buffer_one
    catchup_window: 2h
    pause_on_failure: false
    heartbeat_grace: 30m
    lock: ledger
    lock_ttl: 2m
    timeout: 1h
    max_attempts: 5
    args: {region: eu}
  - id: hourly-report
    job: report
    every: 1h
    overlap: allow_all
"""


def test_a_good_file_parses_to_its_definitions_in_order(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    nightly, report = load_schedule_file(write_file(GOOD_FILE), registry)

    assert nightly == ScheduleDefinition(
        id="nightly-reconcile",
        job="reconcile",
        cron="0 2 * * *",
        overlap=Overlap.buffer_one,
        catchup_window=timedelta(hours=2),
        pause_on_failure=False,
        heartbeat_grace=timedelta(minutes=30),
        lock="ledger",
        lock_ttl=timedelta(minutes=2),
        timeout=timedelta(hours=1),
        max_attempts=5,
        args={"region": "eu"},
    )
    assert report.id == "hourly-report"
    assert report.every == timedelta(hours=1)
    assert report.cron is None
    assert report.overlap is Overlap.allow_all


def test_a_path_given_as_a_string_is_read_too(write_file: WriteFile, registry: JobRegistry) -> None:
    assert len(load_schedule_file(str(write_file(GOOD_FILE)), registry)) == 2


def test_unset_fields_take_their_defaults(write_file: WriteFile, registry: JobRegistry) -> None:
    path = write_file(one_entry("job: report\nevery: 15m"))

    (definition,) = load_schedule_file(path, registry)

    assert definition.overlap is Overlap.skip
    assert definition.catchup_window == timedelta(hours=1)
    assert definition.pause_on_failure is True
    assert definition.heartbeat_grace == timedelta(minutes=15)
    assert definition.lock is None
    assert definition.lock_ttl == timedelta(seconds=60)
    assert definition.timeout == timedelta(minutes=15)
    assert definition.max_attempts == 3
    assert definition.args == {}


def test_the_cron_expression_is_normalised(write_file: WriteFile, registry: JobRegistry) -> None:
    path = write_file(one_entry('job: report\ncron: "0   2 * *  *"'))
    (definition,) = load_schedule_file(path, registry)
    assert definition.cron == "0 2 * * *"


def test_an_empty_schedule_list_is_allowed(write_file: WriteFile, registry: JobRegistry) -> None:
    assert load_schedule_file(write_file("schedules: []\n"), registry) == []


def test_the_lock_name_defaults_to_one_private_to_the_schedule() -> None:
    definition = ScheduleDefinition(id="s1", job="report", every=timedelta(minutes=5))
    assert definition.lock_name == "schedule:s1"


def test_the_lock_name_is_the_shared_lock_when_one_is_named() -> None:
    definition = ScheduleDefinition.model_validate(
        {"id": "s1", "job": "report", "every": "5m", "lock": "ledger"}
    )
    assert definition.lock_name == "ledger"


def test_the_args_digest_does_not_depend_on_key_order() -> None:
    first = ScheduleDefinition(id="s1", job="report", cron="@daily", args={"a": 1, "b": [1, 2]})
    second = ScheduleDefinition(
        id="s2", job="report", every=timedelta(days=1), args={"b": [1, 2], "a": 1}
    )
    assert first.args_digest() == second.args_digest()
    assert len(first.args_digest()) == 64


def test_the_args_digest_changes_with_the_args() -> None:
    first = ScheduleDefinition(id="s1", job="report", cron="@daily", args={"a": 1})
    second = ScheduleDefinition(id="s1", job="report", cron="@daily", args={"a": 2})
    assert first.args_digest() != second.args_digest()


def test_a_definition_rebuilds_from_its_own_dump() -> None:
    definition = ScheduleDefinition.model_validate(
        {"id": "s1", "job": "report", "every": "90s", "lock_ttl": "2m"}
    )
    assert ScheduleDefinition.model_validate(definition.model_dump()) == definition


def test_a_definition_is_immutable() -> None:
    definition = ScheduleDefinition(id="s1", job="report", every=timedelta(minutes=5))
    with pytest.raises(ValidationError, match="frozen"):
        definition.id = "s2"


def test_it_refuses_a_bad_cron(write_file: WriteFile, registry: JobRegistry) -> None:
    path = write_file(one_entry('job: report\ncron: "61 * * * *"'))
    assert problems_in(path, registry) == [
        "schedule 's1' (entry 1), field 'cron': minute field '61': 61 is outside 0-59"
    ]


def test_it_refuses_a_step_that_does_not_tile_the_hours(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(one_entry('job: report\ncron: "0 */5 * * *"'))
    (problem,) = problems_in(path, registry)
    assert problem.startswith(
        "schedule 's1' (entry 1), field 'cron': hour field '*/5' does not tile 24 hours: "
        "it fires at 0,5,10,15,20 and then waits 4 hours at the wrap-around"
    )


def test_it_refuses_a_step_that_does_not_tile_the_minutes(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(one_entry('job: report\ncron: "*/7 * * * *"'))
    (problem,) = problems_in(path, registry)
    assert "field 'cron': minute field '*/7' does not tile 60 minutes" in problem
    assert "waits 4 minutes at the wrap-around" in problem


def test_it_refuses_a_bad_every(write_file: WriteFile, registry: JobRegistry) -> None:
    path = write_file(one_entry("job: report\nevery: 5 minutes"))
    assert problems_in(path, registry) == [
        "schedule 's1' (entry 1), field 'every': '5 minutes' is not a duration: use a whole "
        "number followed by s, m, h or d (e.g. 30s, 15m, 6h, 1d)"
    ]


def test_it_asks_for_a_unit_on_a_bare_number(write_file: WriteFile, registry: JobRegistry) -> None:
    path = write_file(one_entry("job: report\nevery: 30"))
    assert problems_in(path, registry) == [
        "schedule 's1' (entry 1), field 'every': 30 has no unit: add s, m, h or d "
        "(e.g. '30s' or '30m')"
    ]


def test_it_refuses_a_bad_duration_in_any_duration_field(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(one_entry("job: report\nevery: 5m\nheartbeat_grace: soon\ntimeout: 0m"))
    assert problems_in(path, registry) == [
        "schedule 's1' (entry 1), field 'heartbeat_grace': 'soon' is not a duration: use a "
        "whole number followed by s, m, h or d (e.g. 30s, 15m, 6h, 1d)",
        "schedule 's1' (entry 1), field 'timeout': '0m' is not a duration: it must be longer "
        "than zero",
    ]


def test_it_refuses_both_cron_and_every(write_file: WriteFile, registry: JobRegistry) -> None:
    path = write_file(one_entry('job: report\ncron: "@daily"\nevery: 1d'))
    assert problems_in(path, registry) == [
        "schedule 's1' (entry 1): set exactly one of `cron` and `every`: this entry sets both"
    ]


def test_it_refuses_neither_cron_nor_every(write_file: WriteFile, registry: JobRegistry) -> None:
    path = write_file(one_entry("job: report"))
    assert problems_in(path, registry) == [
        "schedule 's1' (entry 1): set exactly one of `cron` and `every`: this entry sets neither"
    ]


def test_an_args_key_the_jobs_model_does_not_declare_is_refused_with_the_closest(
    write_file: WriteFile,
) -> None:
    class Times(BaseModel):
        times: int = 1

    class Loose(BaseModel):
        model_config = ConfigDict(extra="allow")
        times: int = 1

    registry = JobRegistry()
    for name, model in (("strict", Times), ("loose", Loose)):
        registry.register(JobSpec(name=name, func=_noop, read_only=False, args_model=model))
    path = write_file(one_entry("job: strict\nevery: 5m\nargs: {tims: 3}"))
    assert problems_in(path, registry) == [
        "schedule 's1' (entry 1), field 'args': args for job 'strict' are invalid: tims: not an "
        "argument of this job (did you mean 'times'?); it takes: times"
    ]
    # A model that takes extras says so itself; a worker running an older file still accepts it.
    loose = write_file(one_entry("job: loose\nevery: 5m\nargs: {tims: 3}"))
    assert [d.args for d in load_schedule_file(loose, registry)] == [{"tims": 3}]
    assert registry.get("strict").validate_args({"tims": 3}).times == 1


def test_it_refuses_an_unknown_job_listing_the_known_ones(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(one_entry("job: reconcil\nevery: 5m"))
    assert problems_in(path, registry) == [
        "schedule 's1' (entry 1), field 'job': unknown job 'reconcil' (did you mean 'reconcile'? "
        "known: reconcile, report)"
    ]


def test_it_reports_an_unknown_job_alongside_other_problems_of_the_entry(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(one_entry("job: nope\nevery: 5x"))
    problems = problems_in(path, registry)
    assert len(problems) == 2
    assert problems[0].startswith("schedule 's1' (entry 1), field 'every': '5x' is not a duration")
    assert problems[1] == (
        "schedule 's1' (entry 1), field 'job': unknown job 'nope' (known: reconcile, report)"
    )


def test_it_refuses_allow_all_on_a_job_that_is_not_read_only(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    fields = "job: reconcile\nevery: 5m\noverlap: allow_all\nargs: {region: eu}"
    path = write_file(one_entry(fields))
    assert problems_in(path, registry) == [
        "schedule 's1' (entry 1), field 'overlap': overlap allow_all is refused for job "
        "'reconcile': it is not read_only, so two concurrent runs could both apply their side "
        "effects; use skip or buffer_one"
    ]


def test_it_refuses_allow_all_with_a_shared_lock(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(one_entry("job: report\nevery: 5m\noverlap: allow_all\nlock: ledger"))
    assert problems_in(path, registry) == [
        "schedule 's1' (entry 1): overlap allow_all cannot share the lock 'ledger': its runs "
        "take one lease per fire time and would run while another schedule holds that lock; "
        "remove `lock`, or use skip or buffer_one"
    ]


def test_it_refuses_a_lock_name_that_could_be_a_per_key_lease(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(one_entry("job: report\nevery: 5m\nlock: 'key:s2@2026-11-30T04:00:00Z'"))
    assert problems_in(path, registry) == [
        "schedule 's1' (entry 1), field 'lock': the lock name 'key:s2@2026-11-30T04:00:00Z' "
        "starts with 'key:', which is reserved for allow_all's per-fire-time leases; choose "
        "another name"
    ]


def test_it_refuses_an_unknown_overlap_policy(write_file: WriteFile, registry: JobRegistry) -> None:
    path = write_file(one_entry("job: report\nevery: 5m\noverlap: queue"))
    (problem,) = problems_in(path, registry)
    assert problem.startswith("schedule 's1' (entry 1), field 'overlap': Input should be 'skip'")
    assert problem.endswith("(got 'queue')")


def test_it_refuses_a_catchup_window_under_ten_seconds(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(one_entry("job: report\nevery: 5m\ncatchup_window: 9s"))
    assert problems_in(path, registry) == [
        "schedule 's1' (entry 1), field 'catchup_window': 9s is below the minimum of 10s "
        "(Temporal's floor for a catchup window)"
    ]


def test_it_refuses_a_lock_ttl_under_five_seconds(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(one_entry("job: report\nevery: 5m\nlock_ttl: 4s"))
    (problem,) = problems_in(path, registry)
    assert problem.startswith(
        "schedule 's1' (entry 1), field 'lock_ttl': 4s is below the minimum of 5s"
    )


@pytest.mark.parametrize(
    ("lock", "message"),
    [
        ('""', "the lock name is empty; remove `lock` to use schedule:{id}"),
        ("x" * 201, "the lock name is 201 characters; the limit is 200"),
    ],
)
def test_it_refuses_an_empty_or_overlong_lock_name(
    lock: str, message: str, write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(one_entry(f"job: report\nevery: 5m\nlock: {lock}"))
    assert problems_in(path, registry) == [f"schedule 's1' (entry 1), field 'lock': {message}"]


@pytest.mark.parametrize("attempts", ["0", "101", "2.5", "true"])
def test_it_refuses_max_attempts_outside_one_to_a_hundred(
    attempts: str, write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(one_entry(f"job: report\nevery: 5m\nmax_attempts: {attempts}"))
    (problem,) = problems_in(path, registry)
    assert problem.startswith("schedule 's1' (entry 1), field 'max_attempts': ")
    assert problem.endswith(f"(got {attempts.replace('true', 'True')})")


def test_it_refuses_an_invalid_id_and_labels_the_entry_by_number(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file("schedules:\n  - id: Nightly_Reconcile\n    job: report\n    every: 5m\n")
    assert problems_in(path, registry) == [
        "entry 1, field 'id': 'Nightly_Reconcile' is not a valid id: use 1-63 lowercase letters, "
        "digits and dashes, starting with a letter or digit"
    ]


def test_it_refuses_a_missing_id(write_file: WriteFile, registry: JobRegistry) -> None:
    path = write_file("schedules:\n  - job: report\n    every: 5m\n")
    assert problems_in(path, registry) == ["entry 1, field 'id': is required"]


def test_it_refuses_duplicate_ids(write_file: WriteFile, registry: JobRegistry) -> None:
    path = write_file(
        """\
        schedules:
          - {id: twice, job: report, every: 5m}
          - {id: once, job: report, every: 5m}
          - {id: twice, job: report, every: 10m}
        """
    )
    assert problems_in(path, registry) == ["id 'twice' is used by entries 1 and 3"]


def test_it_refuses_an_unknown_field_and_suggests_the_closest(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(one_entry("job: report\nevery: 5m\ncatchup: 1h"))
    assert problems_in(path, registry) == [
        "schedule 's1' (entry 1): unknown field 'catchup' (did you mean 'catchup_window'?)"
    ]


def test_it_refuses_an_unknown_field_without_a_suggestion_when_none_is_close(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(one_entry("job: report\nevery: 5m\nzzz: 1"))
    assert problems_in(path, registry) == ["schedule 's1' (entry 1): unknown field 'zzz'"]


def test_it_refuses_args_that_fail_the_jobs_args_model(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(one_entry("job: reconcile\nevery: 5m\nargs: {region: 5}"))
    assert problems_in(path, registry) == [
        "schedule 's1' (entry 1), field 'args': args for job 'reconcile' are invalid: "
        "region: Input should be a valid string"
    ]


def test_it_refuses_args_json_cannot_carry(write_file: WriteFile, registry: JobRegistry) -> None:
    path = write_file(one_entry("job: report\nevery: 5m\nargs: {since: 2024-01-01}"))
    (problem,) = problems_in(path, registry)
    assert problem.startswith("schedule 's1' (entry 1), field 'args': args.since is a date")
    assert "quote dates and times" in problem


def test_one_bad_entry_among_good_ones_is_the_only_one_named(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(
        """\
        schedules:
          - {id: first, job: report, every: 5m}
          - {id: broken, job: report, cron: "0 */5 * * *"}
          - {id: third, job: reconcile, every: 1h, args: {region: eu}}
        """
    )
    (problem,) = problems_in(path, registry)
    assert problem.startswith("schedule 'broken' (entry 2), field 'cron': hour field '*/5'")


def test_it_reports_the_problems_of_every_entry_at_once(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(
        """\
        schedules:
          - {id: a, job: report, every: 5x}
          - {id: b, job: report}
          - {id: c, job: nope, every: 5m}
        """
    )
    problems = problems_in(path, registry)
    assert [p.split(",")[0].split(":")[0] for p in problems] == [
        "schedule 'a' (entry 1)",
        "schedule 'b' (entry 2)",
        "schedule 'c' (entry 3)",
    ]


def test_it_reports_a_yaml_syntax_error_with_its_line(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file("schedules:\n  - id: a\n    cron: */5 * * * *\n")
    (problem,) = problems_in(path, registry)
    assert problem.startswith("invalid YAML at line 3, column 12: ")


def test_it_refuses_a_key_written_twice_in_one_entry(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(one_entry('job: report\ncron: "@daily"\ncron: "@hourly"'))
    assert problems_in(path, registry) == [
        "invalid YAML at line 5, column 5: found the key 'cron' twice"
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "the file is empty"),
        ("- id: a\n", "the top level is a list"),
        ("jobs: []\n", "the `schedules` key is missing"),
        ("schedules:\n", "`schedules` is empty"),
        ("schedules: {id: a}\n", "`schedules` is a mapping; it must be a list"),
    ],
)
def test_it_refuses_a_file_without_a_schedules_list(
    text: str, problem: str, write_file: WriteFile, registry: JobRegistry
) -> None:
    (found,) = [p for p in problems_in(write_file(text), registry) if "top-level key" not in p]
    assert found.startswith(problem)


def test_it_refuses_an_unknown_top_level_key(write_file: WriteFile, registry: JobRegistry) -> None:
    path = write_file("schedules: []\nschedule: []\n")
    assert problems_in(path, registry) == [
        "unknown top-level key 'schedule' (did you mean 'schedules'?)"
    ]


def test_it_refuses_an_entry_that_is_not_a_mapping(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file("schedules:\n  - nightly\n")
    assert problems_in(path, registry) == [
        "entry 1 is a string; each entry must be a mapping of fields"
    ]


def test_a_missing_file_is_invalid_input_naming_the_path(
    tmp_path: Path, registry: JobRegistry
) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(InvalidInput, match=f"schedule file '{path}' does not exist"):
        load_schedule_file(path, registry)


def test_an_unreadable_file_is_invalid_input_naming_the_path(
    tmp_path: Path, registry: JobRegistry
) -> None:
    with pytest.raises(InvalidInput, match=f"cannot read schedule file '{tmp_path}'"):
        load_schedule_file(tmp_path, registry)


def alias_bomb(levels: int) -> str:
    """A file whose args hold `levels` anchors, each a list of ten aliases of the one before:
    a few hundred bytes that expand to 10**levels strings."""
    anchors = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    anchors += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]" for n in range(1, levels)]
    args = "\n".join(f"      {line}" for line in anchors)
    return f"schedules:\n  - id: s1\n    job: report\n    every: 1h\n    args:\n{args}\n"


def test_an_alias_bomb_is_refused_without_being_expanded(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    # A billion strings once expanded: it can only be refused if it is never expanded.
    path = write_file(alias_bomb(9))
    assert path.stat().st_size < 1000
    (problem,) = problems_in(path, registry)
    assert problem.startswith(
        f"the file's YAML aliases (*name) would add more than {ALIAS_EXPANSION_LIMIT:,} nodes"
    )


def test_an_alias_used_inside_its_own_anchor_is_refused(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(one_entry("job: report\nevery: 1h\nargs: {loop: &loop [*loop]}"))
    assert problems_in(path, registry) == [
        "the YAML anchor at line 5 is used inside itself, so the file would never end; "
        "remove that alias"
    ]


def test_a_file_over_the_size_limit_is_refused_unread(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    # Valid YAML all the way through: only its size is wrong.
    padding = "#" + "x" * 1023 + "\n"
    path = write_file(GOOD_FILE + padding * (MAX_FILE_BYTES // len(padding) + 1))
    assert path.stat().st_size > MAX_FILE_BYTES
    assert problems_in(path, registry) == [
        "the file is larger than 4 MiB, the limit for a schedule file; split it, or look for "
        "what made it grow"
    ]
    # At the limit it is read.
    path.write_bytes(path.read_bytes()[:MAX_FILE_BYTES])
    assert len(load_schedule_file(path, registry)) == 2


def test_nesting_too_deep_to_parse_is_refused_with_one_sentence(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    path = write_file(
        one_entry("job: report\nevery: 1h\nargs: {deep: " + "[" * 5000 + "]" * 5000 + "}")
    )
    assert problems_in(path, registry) == ["the file nests lists or mappings too deeply to read"]


def test_a_file_without_aliases_and_one_sharing_a_flat_block_still_load(
    write_file: WriteFile, registry: JobRegistry
) -> None:
    assert [d.id for d in load_schedule_file(write_file(GOOD_FILE), registry)] == [
        "nightly-reconcile",
        "hourly-report",
    ]
    shared = """\
    schedules:
      - id: first
        job: report
        every: 1h
        exclude: &holidays [2027-12-25, 2027-12-26, {month: jan, day_of_month: 1}]
      - id: second
        job: report
        every: 2h
        exclude: *holidays
    """
    first, second = load_schedule_file(write_file(shared), registry)
    assert (second.id, second.every) == ("second", timedelta(hours=2))
    assert len(second.exclude) == 3 and second.exclude == first.exclude
