"""Pause and unpause by selector on the real servers: `--job`, `--label` and `--all` act on
exactly the schedules they match, each recorded with the one reason; a selector that cannot be
read, or matches nothing, is one error and changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import Client

from cronwarden.schedules.apply import apply_definitions
from tests.support.cli import cli
from tests.support.database import fetch
from tests.support.schedules import definition

pytestmark = pytest.mark.integration

# Two labels and two jobs, crossed: each selector below picks a different pair.
FLEET: dict[str, dict[str, Any]] = {
    "a": {"labels": {"team": "billing"}, "job": "probe"},
    "b": {"labels": {"team": "billing"}, "job": "export"},
    "c": {"labels": {"team": "ops"}, "job": "export"},
    "d": {"job": "probe"},
}


@pytest_asyncio.fixture(loop_scope="session")
async def fleet(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> AsyncIterator[dict[str, str]]:
    ids = {name: f"{schedule_id}-{name}" for name in FLEET}
    defns = [definition(ids[name], every="1h", **fields) for name, fields in FLEET.items()]
    await apply_definitions(client, pool, defns, task_queue=task_queue)
    try:
        yield ids
    finally:
        for sid in ids.values():
            await client.get_schedule_handle(sid).delete()


async def paused(client: Client, pool: asyncpg.Pool, ids: dict[str, str]) -> set[str]:
    """The names paused, after checking that Temporal and the heartbeat row agree on each."""
    rows = {
        r["schedule_id"]: r["paused"]
        for r in await fetch(pool, "SELECT schedule_id, paused FROM cronwarden.heartbeats")
    }
    found = set()
    for name, sid in ids.items():
        in_temporal = (await client.get_schedule_handle(sid).describe()).schedule.state.paused
        assert in_temporal == rows[sid], (name, in_temporal, rows[sid])
        if in_temporal:
            found.add(name)
    return found


async def changed(pool: asyncpg.Pool, ids: dict[str, str]) -> list[tuple[str, str, str | None]]:
    names = {sid: name for name, sid in ids.items()}
    rows = await fetch(
        pool, "SELECT schedule_id, action, reason FROM cronwarden.change_log ORDER BY id"
    )
    return [(names[r["schedule_id"]], r["action"], r["reason"]) for r in rows]


async def test_each_selector_pauses_and_unpauses_exactly_the_schedules_it_matches(
    client: Client, pool: asyncpg.Pool, cli_env: dict[str, str], fleet: dict[str, str]
) -> None:
    async def run(*args: str) -> None:
        result = await cli(cli_env, "schedules", *args)
        assert result.code == 0, result

    await run("pause", "--label", "team=billing", "--reason", "invoice freeze")
    assert await paused(client, pool, fleet) == {"a", "b"}
    assert await changed(pool, fleet) == [
        ("a", "pause", "invoice freeze"),
        ("b", "pause", "invoice freeze"),
    ]
    await run("unpause", "--label", "team=billing")
    assert await paused(client, pool, fleet) == set()

    await run("pause", "--job", "export", "--reason", "export bug", "--for", "1h")
    assert await paused(client, pool, fleet) == {"b", "c"}
    ends = await fetch(
        pool,
        "SELECT count(*) AS n FROM cronwarden.heartbeats WHERE paused_until IS NOT NULL"
        " AND schedule_id = ANY($1::text[])",
        [fleet["b"], fleet["c"]],
    )
    assert ends[0]["n"] == 2
    before = len(await changed(pool, fleet))
    # Only the paused ones are unpaused (and recorded).
    await run("unpause", "--all", "--reason", "fixed")
    assert await paused(client, pool, fleet) == set()
    assert (await changed(pool, fleet))[before:] == [
        ("b", "unpause", "fixed"),
        ("c", "unpause", "fixed"),
    ]

    await run("pause", "--all", "--reason", "datacenter move")
    assert await paused(client, pool, fleet) == {"a", "b", "c", "d"}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["pause", "--label", "team!=billing", "--reason", "r"], "not supported"),
        (["pause", "--label", "team=nobody", "--reason", "r"], "matches no schedule"),
        (["pause", "--label", "Bad Key", "--reason", "r"], "label selector"),
        (["pause", "--job", "nosuch", "--reason", "r"], "matches no schedule"),
        (["pause", "--label", "team=billing"], "needs --reason"),
        (["pause", "--all"], "needs --reason"),
        (["pause", "--job", "probe", "--all", "--reason", "r"], "one of ID, --job"),
        (["pause", "--reason", "r"], "one of ID, --job"),
        (["pause", "--all", "--reason", "r", "--for", "0s"], "longer than zero"),
        (["unpause", "--label", "team=billing"], "matches no paused schedule"),
    ],
)
async def test_a_bad_or_empty_selector_is_one_error_and_changes_nothing(
    client: Client,
    pool: asyncpg.Pool,
    cli_env: dict[str, str],
    fleet: dict[str, str],
    args: list[str],
    says: str,
) -> None:
    result = await cli(cli_env, "schedules", *args)
    assert result.code == 2, result
    [line] = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert says in line, line
    assert await paused(client, pool, fleet) == set()
    assert await changed(pool, fleet) == []
