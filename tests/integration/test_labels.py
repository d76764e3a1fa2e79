"""Schedule labels on the real servers: a file's labels checked before anything is applied,
`schedules list --label` picking schedules by them, an overdue page carrying them to every sink
(webhook, PagerDuty, Slack on a real HTTP receiver) and a worker's run counts labelled by the
keys it opted into, collapsing values past the bound into `other`."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client

from cronwarden import worker_metrics
from cronwarden.embedded import EmbeddedTemporal, free_port
from cronwarden.schedules.apply import apply_definitions, describe_or_none
from cronwarden.schedules.inventory import action_memo, schedule_ids
from cronwarden.schedules.mapping import DEFINITION_MEMO, DIGEST_MEMO
from tests.support.cleanup import delete_schedules
from tests.support.cli import cli, cli_json
from tests.support.health_worker import serving_worker
from tests.support.http_probe import http_get_text
from tests.support.monitor import (
    ROUTING_KEY,
    SLACK_PATH,
    events,
    expected_ago,
    heartbeat_lands,
    monitoring,
    passes,
    stage,
)
from tests.support.monitor import receiver as receiver
from tests.support.receiver import Receiver
from tests.support.schedules import FAR_CRON, new_id, write_schedules_file, yearly_definition
from tests.support.servers import worker_settings
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture(loop_scope="session")
async def created(client: Client) -> AsyncIterator[list[str]]:
    """Ids of the schedules a test creates, deleted after it."""
    ids: list[str] = []
    yield ids
    await delete_schedules(client, ids)


def schedules_file(tmp_path: Path, labels: dict[str, str | None]) -> Path:
    """A file of yearly `probe` schedules, each with the labels written as given (None: no
    `labels`); the same job and spec, so each allows the duplicates."""
    lines = ["schedules:"]
    for sid, written in labels.items():
        lines += [
            f"  - id: {sid}",
            "    job: probe",
            f"    cron: '{FAR_CRON}'",
            "    allow_duplicate: true",
            *([f"    labels: {written}"] if written is not None else []),
        ]
    return write_schedules_file(tmp_path, "\n".join(lines) + "\n")


def unique(prefix: str) -> str:
    """A label value no other test's schedule carries (they share Temporal's namespace)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_list_label_picks_schedules_by_their_labels_and_refuses_what_it_cannot_read(
    tmp_path: Path, cli_env: dict[str, str], client: Client, created: list[str]
) -> None:
    team = unique("billing")
    prod, staging, plain = new_id("prod"), new_id("staging"), new_id("plain")
    created += [prod, staging, plain]
    path = schedules_file(
        tmp_path,
        {prod: f"{{team: {team}, env: prod}}", staging: f"{{team: {team}, env: st}}", plain: None},
    )
    applied = await cli(cli_env, "schedules", "apply", str(path))
    assert applied.code == 0, applied.stderr

    async def all_listed() -> bool:
        return {prod, staging, plain} <= set(await schedule_ids(client))

    await wait_for(all_listed, timeout=30, what="the three schedules in Temporal's list")

    async def listed(*flags: str) -> list[str]:
        found = await cli_json(cli_env, "schedules", "list", *flags)
        return [r["schedule_id"] for r in found["schedules"]]

    assert await listed("--label", f"team={team}") == sorted([prod, staging])
    assert await listed("--label", f"team={team}", "--label", "env=prod") == [prod]
    assert await listed("--label", f"team={team},env=st") == [staging]
    assert await listed("--label", f"team={team}", "-l", "env=nowhere") == []
    rows = {
        r["schedule_id"]: r for r in (await cli_json(cli_env, "schedules", "list"))["schedules"]
    }
    assert rows[prod]["labels"] == {"env": "prod", "team": team}
    assert "labels" not in rows[plain]  # an unlabelled schedule's row keeps its shape

    text = await cli(cli_env, "schedules", "list", "--label", f"team={team}")
    assert text.code == 0, text.stderr
    [line] = [x for x in text.stdout.splitlines() if prod in x]
    assert f"env=prod,team={team}" in line
    none = await cli(cli_env, "schedules", "list", "--label", f"team={unique('nobody')}")
    assert none.code == 0 and none.stdout.startswith("no schedules with the labels team=")

    for bad, said in (
        (f"team!={team}", f"'team!={team}' is not supported (only equality and presence are)"),
        ("Team=x", "'Team' is not a valid label key"),
        ("=x", "'=x' names no label key"),
    ):
        refused = await cli(cli_env, "schedules", "list", "--label", bad)
        assert refused.code == 2, refused
        assert said in refused.stderr and refused.stdout == ""
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


async def test_a_file_with_a_bad_label_is_refused_whole_and_applies_nothing(
    tmp_path: Path, cli_env: dict[str, str], client: Client, created: list[str]
) -> None:
    good, bad = new_id("good"), new_id("bad")
    created += [good, bad]
    path = schedules_file(tmp_path, {good: "{team: billing}", bad: "{env: 2}"})
    refused = await cli(cli_env, "schedules", "apply", str(path))
    assert refused.code == 2, refused
    assert (
        f"schedule '{bad}' (entry 2), field 'labels': the value of label 'env' is a number to "
        "YAML (2); label values are strings: quote it as you wrote it (env: '2')"
    ) in refused.stderr
    assert "nothing applied" in refused.stderr
    assert await describe_or_none(client, good) is None


# The digest the code before labels gave this definition on this task queue: Temporal must hold
# the same one after an upgrade, or the first apply would push every existing schedule again.
# (The run input's new `labels` needs no MAPPING_VERSION bump: an unlabelled schedule's is None,
# as an input written before it decodes. A bump changes this digest on purpose: re-pin then.)
_PINNED_ID = "digest-before-labels"
_DIGEST_BEFORE_LABELS = "985f1a7f8b06abaedc4dcf0f83f3b284012cd142ed5de5cab0c4f7b56b21c3fc"


async def test_a_utc_schedule_without_labels_keeps_its_digest_in_temporal(
    client: Client, pool: asyncpg.Pool, created: list[str]
) -> None:
    created.append(_PINNED_ID)
    defn = yearly_definition(_PINNED_ID)
    [change] = await apply_definitions(client, pool, [defn], task_queue=_PINNED_ID)
    assert change.action == "created"
    desc = await describe_or_none(client, _PINNED_ID)
    assert desc is not None
    memo = await action_memo(client, desc)
    assert memo[DIGEST_MEMO] == _DIGEST_BEFORE_LABELS
    assert "labels" not in memo[DEFINITION_MEMO]
    [again] = await apply_definitions(client, pool, [defn], task_queue=_PINNED_ID)
    assert again.action == "unchanged"


async def test_an_overdue_page_carries_the_schedules_labels_to_every_sink(
    client: Client,
    pool: asyncpg.Pool,
    database: str,
    task_queue: str,
    receiver: Receiver,
    created: list[str],
) -> None:
    labelled, plain = new_id("labelled"), new_id("plain")
    created.append(labelled)
    labels = {"team": "billing", "env": "prod"}
    await apply_definitions(
        client, pool, [yearly_definition(labelled, labels=labels)], task_queue=task_queue
    )
    await expected_ago(pool, labelled, "1 hour")
    await stage(pool, plain)  # a schedule with no recorded definition: no labels
    sinks: dict[str, Any] = {
        "pagerduty_routing_key": ROUTING_KEY,
        "pagerduty_url": receiver.url("/pd"),
        "slack_webhook_url": receiver.url(SLACK_PATH),
        "monitor_system_min_schedules": 100_000,
    }
    async with monitoring(database, receiver, **sinks) as monitor:

        async def every_sink_paged() -> bool:
            await passes(monitor)
            return bool(
                events(receiver, schedule_id=labelled)
                and events(receiver, schedule_id=plain)
                and len(events(receiver, "/pd")) >= 2
                and len(events(receiver, SLACK_PATH)) >= 2
            )

        await wait_for(every_sink_paged, timeout=30, what="both pages at every sink")

        [hook] = events(receiver, schedule_id=labelled)
        assert hook["labels"] == {"env": "prod", "team": "billing"}
        assert "labels" not in events(receiver, schedule_id=plain)[0]
        pd = {e["dedup_key"]: e for e in events(receiver, "/pd")}
        details = pd[f"cronwarden:{labelled}"]["payload"]["custom_details"]
        assert details["labels"] == {"env": "prod", "team": "billing"}
        assert "labels" not in pd[f"cronwarden:{plain}"]["payload"]["custom_details"]
        slack = [e["blocks"][0]["text"]["text"] for e in events(receiver, SLACK_PATH)]
        [labelled_text] = [t for t in slack if labelled in t]
        assert "labels: env=prod, team=billing" in labelled_text
        assert not any("labels:" in t for t in slack if plain in t)

        # Relabelled by a re-apply, then recovered: the resolve goes out with the labels the
        # schedule has when it is sent.
        relabelled = yearly_definition(labelled, labels={"team": "payments"})
        [change] = await apply_definitions(client, pool, [relabelled], task_queue=task_queue)
        assert (change.action, change.changed_fields) == ("updated", ["labels"])
        await heartbeat_lands(pool, labelled)

        async def resolved() -> bool:
            await passes(monitor)
            return bool(events(receiver, schedule_id=labelled, event="resolve"))

        await wait_for(resolved, timeout=30, what="the resolve")
    [resolve] = events(receiver, schedule_id=labelled, event="resolve")
    assert resolve["labels"] == {"team": "payments"}


async def test_a_deleted_schedules_resolve_still_carries_its_last_labels(
    client: Client,
    pool: asyncpg.Pool,
    database: str,
    task_queue: str,
    receiver: Receiver,
    cli_env: dict[str, str],
    created: list[str],
) -> None:
    sid = new_id("deleted")
    created.append(sid)
    labels = {"team": "billing"}
    await apply_definitions(
        client, pool, [yearly_definition(sid, labels=labels)], task_queue=task_queue
    )
    await expected_ago(pool, sid, "1 hour")
    async with monitoring(database, receiver) as monitor:

        async def paged(event: str) -> bool:
            await passes(monitor)
            return bool(events(receiver, schedule_id=sid, event=event))

        await wait_for(lambda: paged("trigger"), timeout=30, what="the trigger")
        deleted = await cli(cli_env, "schedules", "delete", sid, "--yes")
        assert deleted.code == 0, deleted.stderr
        await wait_for(lambda: paged("resolve"), timeout=30, what="the resolve")
    [resolve] = events(receiver, schedule_id=sid, event="resolve")
    # Its delete is the latest row of its history; the resolve still goes where the trigger went.
    assert resolve["resolution"] == "schedule-deleted"
    assert resolve["labels"] == labels


@pytest_asyncio.fixture(loop_scope="session")
async def labelled_worker(
    temporal_server: EmbeddedTemporal,
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[int]:
    """A worker counting runs by the `team` label, two values at most; its health port."""
    monkeypatch.setattr(worker_metrics, "LABEL_VALUES_BOUND", 2)
    settings = worker_settings(
        temporal_server, task_queue, health_port=free_port(), metrics_labels="team"
    )
    async with serving_worker(settings, client=client, pool=pool) as port:
        yield port


async def team_counts(port: int) -> dict[tuple[str, str], float]:
    status, text = await http_get_text(port, "/metrics")
    assert status == 200
    return {
        (s.labels["schedule_id"], s.labels["label_team"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "cronwarden_runs_total" and s.labels["outcome"] == "ran"
    }


async def test_run_counts_carry_the_opted_in_label_and_collapse_values_past_the_bound(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    labelled_worker: int,
    created: list[str],
) -> None:
    teams = {new_id("a"): "alpha", new_id("b"): "beta", new_id("c"): "gamma", new_id("d"): None}
    created += list(teams)
    definitions = [
        yearly_definition(
            sid,
            labels={"team": team, "env": "prod"} if team else {"env": "prod"},
            allow_duplicate=True,  # the same job and spec: only the labels differ
        )
        for sid, team in teams.items()
    ]
    await apply_definitions(client, pool, definitions, task_queue=task_queue)
    expected: dict[tuple[str, str], float] = {}
    # One after another, each counted before the next fires: which two values keep their own
    # series (the first two seen) does not depend on which run ends first.
    for sid, team in teams.items():
        await client.get_schedule_handle(sid).trigger()
        shown = "" if team is None else team if team in ("alpha", "beta") else "other"
        expected[(sid, shown)] = 1

        async def counted(sid: str = sid) -> bool:
            return any(k[0] == sid for k in await team_counts(labelled_worker))

        await wait_for(counted, timeout=60, what=f"the run of {sid} counted")
    counts = await team_counts(labelled_worker)
    assert {k: v for k, v in counts.items() if k[0] in teams} == expected
    _, text = await http_get_text(labelled_worker, "/metrics")
    assert "label_env" not in text  # only the keys the worker opted into
