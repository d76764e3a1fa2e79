"""The Kubernetes release step, exercised without a cluster: each release of the manifests is
rendered by the real kubectl, and the command its Job runs is run as the Job's container would
run it (the rendered args, the rendered schedule file at its mount path's name), against real
Temporal and Postgres. What Kubernetes does with the exit code is the rendered podFailurePolicy.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client

from cronwarden.embedded import EmbeddedPostgres
from cronwarden.schedules.inventory import describe_or_none
from tests.support.cleanup import delete_schedules
from tests.support.cli import Result, cli
from tests.support.releases import copy_manifests, release_job, render_release
from tests.support.schedules import new_id

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture(loop_scope="session")
async def schedule(client: Client) -> AsyncIterator[str]:
    sid = new_id("released")
    yield sid
    await delete_schedules(client, [sid])


def schedules_text(sid: str, cron: str, *more: str) -> str:
    """A file of schedule `sid` firing on `cron`, and of each id in `more`, firing yearly."""
    lines = [f"  - id: {sid}\n    job: probe\n    cron: '{cron}'\n"]
    lines += [f"  - id: {other}\n    job: probe\n    cron: '0 5 1 1 *'\n" for other in more]
    return "schedules:\n" + "".join(lines)


async def run_job(docs: list[dict[str, Any]], env: dict[str, str], workdir: Path) -> Result:
    """Run the rendered release Job's container command on the rendered schedule file."""
    pod = release_job(docs)["spec"]["template"]["spec"]
    [container] = pod["containers"]
    args = list(container["args"])
    mounted = Path(args[2])
    [volume] = [v for v in pod["volumes"] if v["name"] == "schedules"]
    [configmap] = [
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == volume["configMap"]["name"]
    ]
    file = workdir / configmap["metadata"]["name"] / mounted.name
    file.parent.mkdir(exist_ok=True)
    file.write_text(configmap["data"][mounted.name])
    args[2] = str(file)
    return await cli(env, *args, "--json")


def fails_the_job_at_once(docs: list[dict[str, Any]], code: int) -> bool:
    """Whether the rendered podFailurePolicy fails the Job, without a retry, on `code`."""
    rules = release_job(docs)["spec"]["podFailurePolicy"]["rules"]
    return any(
        r["action"] == "FailJob"
        and r["onExitCodes"]["operator"] == "In"
        and code in r["onExitCodes"]["values"]
        for r in rules
    )


def actions(result: Result) -> list[str]:
    assert result.code == 0, result
    return [c["action"] for c in json.loads(result.stdout)["changes"]]


async def test_each_release_applies_once_an_old_one_run_again_fails_and_a_rollback_forces(
    tmp_path: Path, cli_env: dict[str, str], client: Client, schedule: str
) -> None:
    tree = copy_manifests(tmp_path)
    added = f"{schedule}-added"  # a schedule only the second release lists
    first = render_release(tree, tag="1.0.0", schedules=schedules_text(schedule, "0 3 1 1 *"))
    second = render_release(
        tree, tag="1.1.0", schedules=schedules_text(schedule, "0 4 1 1 *", added)
    )

    assert actions(await run_job(first, cli_env, tmp_path)) == ["created"]
    try:
        assert actions(await run_job(second, cli_env, tmp_path)) == ["updated", "created"]
        # The same release's Job again (created anew after its TTL): a no-op.
        assert actions(await run_job(second, cli_env, tmp_path)) == ["unchanged", "unchanged"]
        await rejected_then_rolled_back(tree, first, second, cli_env, client, schedule, tmp_path)
    finally:
        await delete_schedules(client, [added])


async def rejected_then_rolled_back(
    tree: Path,
    first: list[dict[str, Any]],
    second: list[dict[str, Any]],
    cli_env: dict[str, str],
    client: Client,
    schedule: str,
    tmp_path: Path,
) -> None:
    """After the second release: the first release's Job is refused, and a rollback to it puts
    its file back."""
    # The first release's Job again, after the second: refused, nothing written, and the Job
    # fails at once.
    before = await client.get_schedule_handle(schedule).describe()
    stale = await run_job(first, cli_env, tmp_path)
    assert stale.code == 2, stale
    assert fails_the_job_at_once(first, stale.code)
    unchanged = await client.get_schedule_handle(schedule).describe()
    assert unchanged.info.last_updated_at == before.info.last_updated_at

    # A rollback to the first release: a release of its own, forced.
    rollback = render_release(
        tree, tag="1.0.0-rollback1", schedules=schedules_text(schedule, "0 3 1 1 *"), rollback=True
    )
    assert release_job(rollback)["metadata"]["name"] != release_job(first)["metadata"]["name"]
    # It puts the first file back as it was: the schedule only the second listed is deleted.
    assert actions(await run_job(rollback, cli_env, tmp_path)) == ["updated", "deleted"]
    assert await describe_or_none(client, f"{schedule}-added") is None
    after = await client.get_schedule_handle(schedule).describe()
    assert after.info.last_updated_at != before.info.last_updated_at
    # Now the second release is the old one.
    assert (await run_job(second, cli_env, tmp_path)).code == 2


async def test_a_release_job_migrates_the_database_then_applies(
    tmp_path: Path,
    cli_env: dict[str, str],
    postgres_server: EmbeddedPostgres,
    schedule: str,
) -> None:
    """The Job, not a monitor pod, carries the release's migration: run on a database no
    migration ran in, its init container brings it to the image's schema (what the new workers
    wait for), then its container applies."""
    name = f"empty_{uuid.uuid4().hex[:12]}"
    postgres_server.create_database(name, exists_ok=False)
    env = {**cli_env, "CRONWARDEN_DATABASE_URL": postgres_server.dsn(name)}
    tree = copy_manifests(tmp_path)
    docs = render_release(tree, tag="1.0.0", schedules=schedules_text(schedule, "0 3 1 1 *"))
    assert (await cli(env, "migrate", "--check")).code == 1

    for init in release_job(docs)["spec"]["template"]["spec"]["initContainers"]:
        assert "command" not in init  # the image's entrypoint: cronwarden
        ran = await cli(env, *init["args"])
        assert ran.code == 0, ran
    assert (await cli(env, "migrate", "--check")).code == 0
    assert actions(await run_job(docs, env, tmp_path)) == ["created"]
