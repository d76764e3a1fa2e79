"""Schedule labels: the rule a file's labels follow, the selectors that pick schedules by them,
the pages and the opted-in metrics that carry them, and the digest they leave alone while unset."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr, ValidationError

from cronwarden.activities.jobs import JobContext, JobRegistry, JobResult, JobSpec
from cronwarden.config import Settings
from cronwarden.errors import InvalidInput, ScheduleFileError
from cronwarden.monitor.messages import compacted, incident_message, with_labels
from cronwarden.monitor.sinks.pagerduty import pagerduty_event
from cronwarden.monitor.sinks.slack import slack_payload
from cronwarden.monitor.sinks.webhook import WebhookSink
from cronwarden.schedules.labels import MAX_LABELS
from cronwarden.schedules.mapping import definition_digest, definition_json, run_input
from cronwarden.schedules.model import ScheduleDefinition, parse_schedule_text
from cronwarden.schedules.selectors import matching_ids, parse_selector
from cronwarden.worker_metrics import OTHER, WorkerMetrics


async def _noop(ctx: JobContext) -> JobResult:
    return None


@pytest.fixture
def registry() -> JobRegistry:
    jobs = JobRegistry()
    jobs.register(JobSpec(name="report", func=_noop, read_only=True, args_model=None))
    return jobs


def entry(labels: str) -> str:
    return textwrap.dedent(
        f"""\
        schedules:
          - id: s1
            job: report
            cron: "0 2 * * *"
            labels: {labels}
        """
    )


def problems(text: str, registry: JobRegistry) -> list[str]:
    with pytest.raises(ScheduleFileError) as caught:
        parse_schedule_text(text, registry)
    return caught.value.problems


def test_a_files_labels_are_read_as_strings(registry: JobRegistry) -> None:
    (defn,) = parse_schedule_text(entry("{team: billing, env: prod-eu.1, tier: ''}"), registry)
    assert defn.labels == {"team": "billing", "env": "prod-eu.1", "tier": ""}


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ("{Team: billing}", "'Team' is not a valid label key"),
        ("{-team: billing}", "'-team' is not a valid label key"),
        ("{team/x: billing}", "'team/x' is not a valid label key"),
        ("{team: bill ing}", "'bill ing' is not a valid value for label 'team'"),
        ("{team: billing-}", "'billing-' is not a valid value for label 'team'"),
        ("{team: " + "b" * 64 + "}", "the value of label 'team' is 64 characters; the limit is 63"),
        ("{" + "k" * 64 + ": x}", "is 64 characters; the limit is 63"),
        (
            "{env: 2}",
            "the value of label 'env' is a number to YAML (2); label values are "
            "strings: quote it as you wrote it (env: '2')",
        ),
        ("{enabled: yes}", "the value of label 'enabled' is a boolean to YAML (true)"),
        ("{1: x}", "the label key 1 is a number to YAML; keys are strings"),
        ("{team: }", "label 'team' has no value: write '' for an empty one"),
        ("[team]", "`labels` must be a mapping of keys to values"),
    ],
)
def test_a_bad_label_is_one_clear_problem_naming_the_entry(
    registry: JobRegistry, labels: str, expected: str
) -> None:
    (problem,) = problems(entry(labels), registry)
    assert problem.startswith("schedule 's1' (entry 1), field 'labels': ")
    assert expected in problem


def test_at_most_sixteen_labels(registry: JobRegistry) -> None:
    many = "{" + ", ".join(f"k{i}: v" for i in range(MAX_LABELS + 1)) + "}"
    (problem,) = problems(entry(many), registry)
    assert f"{MAX_LABELS + 1} labels; a schedule carries at most {MAX_LABELS}" in problem
    just = "{" + ", ".join(f"k{i}: v" for i in range(MAX_LABELS)) + "}"
    assert len(parse_schedule_text(entry(just), registry)[0].labels) == MAX_LABELS


# Digests of these definitions as the code before labels computed them: a schedule without
# labels must keep its digest, or every existing schedule would be pushed again on the first
# apply after an upgrade. (A MAPPING_VERSION bump changes them on purpose: re-pin then.)
_DIGESTS_BEFORE_LABELS = {
    "nightly": "15f8429bcae7ab5a72a76cc056e7d3f0e7d2c09741ce9925a0ba7b198213b933",
    "every": "034bbe2767ee7e8c84b8c41fc0c5902e5e1bd938601760aac122405984002eb5",
}


def test_a_schedule_without_labels_keeps_its_digest_and_a_labelled_one_changes_it() -> None:
    nightly = ScheduleDefinition(
        id="nightly", job="report", cron="0 2 * * *", args={"region": "eu"}
    )
    every = ScheduleDefinition(id="every", job="report", every="15m")  # type: ignore[arg-type]
    assert definition_digest(nightly, task_queue="q") == _DIGESTS_BEFORE_LABELS["nightly"]
    assert definition_digest(every, task_queue="q") == _DIGESTS_BEFORE_LABELS["every"]
    empty = nightly.model_copy(update={"labels": {}})
    assert definition_digest(empty, task_queue="q") == _DIGESTS_BEFORE_LABELS["nightly"]
    labelled = ScheduleDefinition.model_validate({**nightly.model_dump(), "labels": {"team": "a"}})
    assert definition_json(labelled, task_queue="q")["labels"] == {"team": "a"}
    assert definition_digest(labelled, task_queue="q") != _DIGESTS_BEFORE_LABELS["nightly"]
    other = ScheduleDefinition.model_validate({**nightly.model_dump(), "labels": {"team": "b"}})
    assert definition_digest(other, task_queue="q") != definition_digest(labelled, task_queue="q")


def test_the_run_input_carries_the_labels_for_the_workers_metrics() -> None:
    plain = ScheduleDefinition(id="a", job="report", cron="0 2 * * *")
    assert run_input(plain, task_queue="q").labels is None
    labelled = ScheduleDefinition.model_validate(
        {"id": "a", "job": "report", "cron": "0 2 * * *", "labels": {"team": "billing"}}
    )
    assert run_input(labelled, task_queue="q").labels == {"team": "billing"}


DEFINITIONS: dict[str, dict[str, Any] | None] = {
    "a": {"labels": {"team": "billing", "env": "prod"}},
    "b": {"labels": {"team": "billing", "env": "staging"}},
    "c": {"labels": {"team": "search"}},
    "d": {"job": "report"},  # recorded before labels existed
    "e": None,  # not created by cronwarden
}


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["team=billing"], ["a", "b"]),
        (["team==billing"], ["a", "b"]),
        (["team=billing", "env=prod"], ["a"]),
        (["team=billing,env=prod"], ["a"]),
        (["env"], ["a", "b"]),
        (["team=nobody"], []),
        (["team=search", "env"], []),
    ],
)
def test_a_selector_ands_its_terms(flags: list[str], expected: list[str]) -> None:
    assert matching_ids(DEFINITIONS, parse_selector(flags)) == expected


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["team!=billing"], "label selector 'team!=billing': 'team!=billing' is not supported"),
        (["!team"], "'!team' is not supported (only equality and presence are)"),
        (["team in (a,b)"], "is not supported"),
        (["=billing"], "'=billing' names no label key"),
        (["team=billing,"], "label selector 'team=billing,' has an empty term"),
        ([""], "has an empty term"),
        ([], "the label selector is empty"),
        (["Team=billing"], "'Team' is not a valid label key"),
        (["team=a=b"], "'a=b' is not a valid value for label 'team'"),
    ],
)
def test_a_selector_that_cannot_be_read_is_one_clear_error(flags: list[str], expected: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_selector(flags)
    assert expected in str(caught.value)


def _page(labels: dict[str, str]) -> dict[str, Any]:
    incident = {
        "id": 7,
        "kind": "overdue",
        "schedule_id": "invoices",
        "summary": "invoices missed its run due 2026-01-01T00:00:00Z",
        "details": {"next_expected_at": "2026-01-01T00:00:00Z"},
        "opened_at": None,
    }
    return with_labels(incident_message("trigger", incident), labels)


def test_each_sink_carries_a_labelled_schedules_labels() -> None:
    page = _page({"team": "billing", "env": "prod"})
    assert page["labels"] == {"env": "prod", "team": "billing"}
    event = pagerduty_event(page, routing_key="r")
    assert event["payload"]["custom_details"]["labels"] == {"env": "prod", "team": "billing"}
    slack = slack_payload(page)
    assert "labels: env=prod, team=billing" in slack["blocks"][0]["text"]["text"]
    body = json.loads(WebhookSink(target=SecretStr("http://x")).render(page))
    assert body["labels"] == {"env": "prod", "team": "billing"}
    # The smallest version a sink may fall back to still routes by them.
    assert list(compacted(page))[-1]["labels"] == page["labels"]


def test_a_page_without_labels_is_as_it_was() -> None:
    page = _page({})
    assert "labels" not in page
    assert "labels" not in pagerduty_event(page, routing_key="r")["payload"]["custom_details"]
    assert "labels:" not in slack_payload(page)["blocks"][0]["text"]["text"]


def _runs(metrics: WorkerMetrics) -> dict[tuple[tuple[str, str], ...], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "cronwarden_runs_total"
    }


def test_metrics_carry_only_the_opted_in_labels() -> None:
    metrics = WorkerMetrics(label_keys=["team", "cost-centre"])
    metrics.run_finished("a", "ran", replay=False, labels={"team": "billing", "env": "prod"})
    metrics.run_finished("b", "ran", replay=False, labels=None)
    runs = _runs(metrics)
    assert (
        runs[
            (
                ("label_cost_centre", ""),
                ("label_team", "billing"),
                ("outcome", "ran"),
                ("schedule_id", "a"),
            )
        ]
        == 1
    )
    assert (
        runs[
            (
                ("label_cost_centre", ""),
                ("label_team", ""),
                ("outcome", "ran"),
                ("schedule_id", "b"),
            )
        ]
        == 1
    )
    assert not any("label_env" in dict(k) for k in runs)


def test_no_label_is_added_by_default() -> None:
    metrics = WorkerMetrics()
    metrics.run_finished("a", "ran", replay=False, labels={"team": "billing"})
    assert list(_runs(metrics)) == [(("outcome", "ran"), ("schedule_id", "a"))]


def test_values_past_the_bound_collapse_to_other() -> None:
    metrics = WorkerMetrics(schedule_label=False, label_keys=["ticket"], label_values_bound=3)
    for n in range(6):
        metrics.run_finished(f"s{n}", "ran", replay=False, labels={"ticket": f"t{n}"})
    metrics.run_finished("s0", "ran", replay=False, labels={"ticket": "t0"})
    runs = _runs(metrics)
    assert runs == {
        (("label_ticket", "t0"), ("outcome", "ran")): 2,
        (("label_ticket", "t1"), ("outcome", "ran")): 1,
        (("label_ticket", "t2"), ("outcome", "ran")): 1,
        (("label_ticket", OTHER), ("outcome", "ran")): 3,
    }


def test_the_metrics_labels_setting_names_valid_keys_once() -> None:
    assert Settings(metrics_labels=" team , env,team").metrics_label_keys() == ["team", "env"]
    assert Settings().metrics_label_keys() == []
    with pytest.raises(ValidationError, match="'Team' is not a valid label key"):
        Settings(metrics_labels="Team")
    with pytest.raises(ValidationError, match="would be one Prometheus label"):
        Settings(metrics_labels="a-b,a.b")
