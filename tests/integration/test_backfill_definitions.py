"""`backfill run` on real servers replays each fire time with the definition in force then: the
recorded definition that judged its part of the window, not the schedule's definition today."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from cronwarden.activities.contract import ALREADY_DONE, OVERLAP_LOCKED, logical_key
from cronwarden.backfill.replay import REPLAYED
from cronwarden.schedules.apply import apply_definitions
from cronwarden.schedules.run_ids import replay_workflow_id
from cronwarden.store import definitions
from cronwarden.times import utc_text
from tests.support.cli import cli, cli_json, iso
from tests.support.database import fetch
from tests.support.outage import apply_paused, even_slots
from tests.support.schedules import definition
from tests.support.waiting import clock_past, wait_for

pytestmark = pytest.mark.integration


async def _history(pool: asyncpg.Pool, schedule_id: str) -> list[tuple[datetime, str]]:
    async with pool.acquire() as conn:
        return [(at, digest) for at, digest, _, _ in await definitions.history(conn, schedule_id)]


async def _outbox_digests(pool: asyncpg.Pool, schedule_id: str) -> dict[datetime, str]:
    rows = await fetch(
        pool,
        "SELECT fire_time, args_digest FROM cronwarden.outbox WHERE schedule_id = $1",
        schedule_id,
    )
    return {r["fire_time"]: r["args_digest"] for r in rows}


async def _effects(pool: asyncpg.Pool, schedule_id: str) -> dict[str, int]:
    rows = await fetch(
        pool,
        "SELECT logical_key, count(*) AS n FROM test_effects WHERE logical_key LIKE $1 GROUP BY 1",
        f"{schedule_id}@%",
    )
    return {r["logical_key"]: r["n"] for r in rows}


async def _never_started(client: Client, schedule_id: str, times: list[datetime]) -> None:
    for fire_time in times:
        with pytest.raises(RPCError) as exc_info:
            await client.get_workflow_handle(replay_workflow_id(schedule_id, fire_time)).describe()
        assert exc_info.value.status == RPCStatusCode.NOT_FOUND


def _ran_by(applied_at: datetime, digest: str, keys: int) -> dict[str, Any]:
    return {"source": "history", "applied_at": utc_text(applied_at), "digest": digest, "keys": keys}


def _summary(replayed: int) -> dict[str, int]:
    return {REPLAYED: replayed, ALREADY_DONE: 0, OVERLAP_LOCKED: 0, "failed": 0}


async def test_a_v1_era_key_is_replayed_with_v1s_args_after_v2_changed_them(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    worker: Worker,
    cli_env: dict[str, str],
) -> None:
    # The probe writes an effect row only when its args say so: the row is what the job saw.
    v1 = definition(schedule_id, every="2s", args={"write": True})
    v2 = definition(schedule_id, every="2s", args={"write": False})
    assert v1.args_digest() != v2.args_digest()
    handle, created_at = await apply_paused(client, pool, task_queue, v1)
    try:
        await wait_for(
            lambda: clock_past(created_at + timedelta(seconds=7)), timeout=30, what="v1's fires"
        )
        await apply_definitions(client, pool, [v2], task_queue=task_queue)
        [(v1_at, v1_digest), (v2_at, v2_digest)] = await _history(pool, schedule_id)
        await wait_for(
            lambda: clock_past(v2_at + timedelta(seconds=5)), timeout=30, what="v2's fires"
        )
        end = v2_at + timedelta(seconds=4)
        # A fire at or before the second of the update was judged by v1 (backfill/spec_history).
        boundary = v2_at.replace(microsecond=0)
        v1_era = [t for t in even_slots(created_at, end) if t <= boundary]
        v2_era = [t for t in even_slots(created_at, end) if t > boundary]
        assert len(v1_era) >= 3 and len(v2_era) >= 1

        window = ["--start", iso(created_at - timedelta(minutes=1)), "--end", iso(end)]
        report = await cli_json(
            cli_env, "backfill", "run", schedule_id, *window, "--include-paused"
        )
        assert report["summary"] == _summary(len(v1_era) + len(v2_era))
        # The outbox records each key with the args digest of the definition in force at its
        # time, and the job saw those args: v1's keys wrote their effect, v2's did not.
        digests = await _outbox_digests(pool, schedule_id)
        assert digests == {t: v1.args_digest() for t in v1_era} | {
            t: v2.args_digest() for t in v2_era
        }
        assert await _effects(pool, schedule_id) == {logical_key(schedule_id, t): 1 for t in v1_era}
        assert report["skipped"] == []
        # Each definition names the history row it came from and how many keys it ran.
        ran = {(d["applied_at"], d["digest"]): d for d in report["definitions"]}
        assert ran == {
            (utc_text(v1_at), v1_digest): _ran_by(v1_at, v1_digest, len(v1_era)),
            (utc_text(v2_at), v2_digest): _ran_by(v2_at, v2_digest, len(v2_era)),
        }
    finally:
        await handle.delete()


async def test_an_update_whose_history_row_was_lost_is_replayed_with_temporals_definition(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    worker: Worker,
    cli_env: dict[str, str],
) -> None:
    # v2 reached Temporal, its row never reached Postgres (an apply killed between the two, or
    # Postgres down), and no apply ran since: the keys after Temporal's write run v2, taken
    # from the schedule's memo, not v1's args.
    v1 = definition(schedule_id, every="2s", args={"write": True})
    v2 = definition(schedule_id, every="2s", args={"write": False})
    handle, created_at = await apply_paused(client, pool, task_queue, v1)
    try:
        await wait_for(
            lambda: clock_past(created_at + timedelta(seconds=5)), timeout=30, what="v1's fires"
        )
        await apply_definitions(client, None, [v2], task_queue=task_queue)
        v2_at = (await handle.describe()).info.last_updated_at
        assert v2_at is not None
        assert len(await _history(pool, schedule_id)) == 1
        await wait_for(
            lambda: clock_past(v2_at + timedelta(seconds=5)), timeout=30, what="v2's fires"
        )
        end = v2_at + timedelta(seconds=4)
        boundary = v2_at.replace(microsecond=0)
        v1_era = [t for t in even_slots(created_at, end) if t <= boundary]
        v2_era = [t for t in even_slots(created_at, end) if t > boundary]
        assert len(v1_era) >= 2 and len(v2_era) >= 1

        window = ["--start", iso(created_at - timedelta(minutes=1)), "--end", iso(end)]
        report = await cli_json(
            cli_env, "backfill", "run", schedule_id, *window, "--include-paused"
        )
        assert [j["source"] for j in report["judged_by"]] == ["history", "unrecorded"]
        assert report["summary"] == _summary(len(v1_era) + len(v2_era))
        digests = await _outbox_digests(pool, schedule_id)
        assert digests == {t: v1.args_digest() for t in v1_era} | {
            t: v2.args_digest() for t in v2_era
        }
        assert {d["source"]: d["keys"] for d in report["definitions"]} == {
            "history": len(v1_era),
            "unrecorded": len(v2_era),
        }
    finally:
        await handle.delete()


async def test_a_key_whose_recorded_job_is_not_the_live_one_is_skipped_unless_asked(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    worker: Worker,
    cli_env: dict[str, str],
) -> None:
    # The file now runs another job under this id (a job replaced, two ids swapped).
    v1 = definition(schedule_id, every="2s", job="probe")
    v2 = definition(schedule_id, every="2s", job="noop-digest")
    handle, created_at = await apply_paused(client, pool, task_queue, v1)
    try:
        await wait_for(
            lambda: clock_past(created_at + timedelta(seconds=5)), timeout=30, what="v1's fires"
        )
        await apply_definitions(client, pool, [v2], task_queue=task_queue)
        v1_era = even_slots(created_at, created_at + timedelta(seconds=5))
        assert len(v1_era) >= 2
        args = [
            "backfill",
            "run",
            schedule_id,
            "--start",
            iso(v1_era[0]),
            "--end",
            iso(v1_era[-1]),
            "--include-paused",
        ]

        # The dry run says the same before anything starts.
        dry = await cli_json(cli_env, *args, "--dry-run")
        assert dry["definitions"] == []
        assert [s["logical_key"] for s in dry["skipped"]] == [
            logical_key(schedule_id, t) for t in v1_era
        ]
        dry_text = await cli(cli_env, *args, "--dry-run")
        assert f"would skip {len(v1_era)} key(s):" in dry_text.stdout, dry_text

        refused = await _json_exit_1(cli_env, *args)
        assert refused["summary"] == _summary(0)
        assert refused["definitions"] == []
        assert [s["logical_key"] for s in refused["skipped"]] == [
            logical_key(schedule_id, t) for t in v1_era
        ]
        for skipped in refused["skipped"]:
            assert "ran job 'probe', the schedule runs 'noop-digest' now" in skipped["reason"]
            assert "--with-current-definition" in skipped["reason"]
        printed = await cli(cli_env, *args)
        assert printed.code == 1, printed
        assert f"skipped {len(v1_era)} key(s), never replayed" in printed.stdout
        assert f"  skipped {logical_key(schedule_id, v1_era[0])}: " in printed.stdout
        await _never_started(client, schedule_id, v1_era)

        # With no recorded definition at all, what ran then is unknown: skipped as well.
        await pool.execute(
            "DELETE FROM cronwarden.definition_history WHERE schedule_id = $1", schedule_id
        )
        unknown = await _json_exit_1(cli_env, *args)
        assert len(unknown["skipped"]) == len(v1_era)
        for skipped in unknown["skipped"]:
            assert skipped["reason"].startswith("no recorded definition covers this time")
        await _never_started(client, schedule_id, v1_era)

        # Asked for: the current definition runs them, and the report says so, dry run first.
        dry = await cli_json(cli_env, *args, "--with-current-definition", "--dry-run")
        assert [(d["source"], d["keys"]) for d in dry["definitions"]] == [("current", len(v1_era))]
        assert dry["skipped"] == []
        forced = await cli_json(cli_env, *args, "--with-current-definition")
        assert forced["summary"] == _summary(len(v1_era))
        assert forced["skipped"] == []
        [used] = forced["definitions"]
        assert (used["source"], used["applied_at"], used["keys"]) == ("current", None, len(v1_era))
    finally:
        await handle.delete()
    assert set(await _outbox_digests(pool, schedule_id)) == set(v1_era)
    # noop-digest writes nothing: the probe of the definition in force then never ran.
    assert await _effects(pool, schedule_id) == {}


async def test_a_key_whose_recorded_args_no_longer_validate_is_skipped_unless_asked(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    worker: Worker,
    cli_env: dict[str, str],
) -> None:
    handle, created_at = await apply_paused(
        client, pool, task_queue, definition(schedule_id, every="2s", job="probe")
    )
    try:
        await wait_for(
            lambda: clock_past(created_at + timedelta(seconds=5)), timeout=30, what="the fires"
        )
        # The job's model changed since the definition was applied: what it recorded then no
        # longer passes it (the worker would fail each replay).
        await pool.execute(
            "UPDATE cronwarden.definition_history "
            """SET definition = jsonb_set(definition, '{args}', '{"sleep": "soon"}') """
            "WHERE schedule_id = $1",
            schedule_id,
        )
        era = even_slots(created_at, created_at + timedelta(seconds=5))
        args = ["backfill", "run", schedule_id, "--start", iso(era[0]), "--end", iso(era[-1])]
        args.append("--include-paused")

        refused = await _json_exit_1(cli_env, *args)
        assert refused["summary"] == _summary(0)
        assert [s["logical_key"] for s in refused["skipped"]] == [
            logical_key(schedule_id, t) for t in era
        ]
        for skipped in refused["skipped"]:
            assert "no longer runs here: " in skipped["reason"], skipped
            assert "sleep" in skipped["reason"] and "--with-current-definition" in skipped["reason"]
        await _never_started(client, schedule_id, era)

        forced = await cli_json(cli_env, *args, "--with-current-definition")
        assert forced["summary"] == _summary(len(era))
        [used] = forced["definitions"]
        assert used["source"] == "current"
    finally:
        await handle.delete()
    assert set(await _outbox_digests(pool, schedule_id)) == set(era)


async def _json_exit_1(env: dict[str, str], *args: str) -> Any:
    """`--json` of a run that leaves keys undone: its document, and exit 1."""
    result = await cli(env, *args, "--json")
    assert result.code == 1, result
    return json.loads(result.stdout)


async def test_replays_of_eras_with_other_locks_take_todays_lease_and_never_overlap(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    worker: Worker,
    cli_env: dict[str, str],
) -> None:
    # v1 ran under one lock, v2 under another. Replays of both eras at once must still keep out
    # of each other (and out of the live fires): they all take today's lease.
    v1 = definition(schedule_id, every="2s", lock=f"old-{schedule_id}", args={"sleep": 2})
    v2 = definition(schedule_id, every="2s", lock=f"new-{schedule_id}", args={"sleep": 2})
    handle, created_at = await apply_paused(client, pool, task_queue, v1)
    try:
        await wait_for(
            lambda: clock_past(created_at + timedelta(seconds=5)), timeout=30, what="v1's fires"
        )
        await apply_definitions(client, pool, [v2], task_queue=task_queue)
        [_, (v2_at, _)] = await _history(pool, schedule_id)
        await wait_for(
            lambda: clock_past(v2_at + timedelta(seconds=5)), timeout=30, what="v2's fires"
        )
        end = v2_at + timedelta(seconds=4)
        window = ["--start", iso(created_at - timedelta(minutes=1)), "--end", iso(end)]
        await cli_json(
            cli_env,
            "backfill",
            "run",
            schedule_id,
            *window,
            "--include-paused",
            "--concurrency",
            "4",
            timeout=120,
        )
    finally:
        await handle.delete()
    rows = await fetch(
        pool,
        "SELECT logical_key, started_at, finished_at FROM test_effects"
        " WHERE logical_key LIKE $1 ORDER BY started_at",
        f"{schedule_id}@%",
    )
    # Both eras replayed: keys under v1's lock and under v2's.
    assert len(rows) >= 4
    overlapping = [
        (a["logical_key"], b["logical_key"])
        for i, a in enumerate(rows)
        for b in rows[i + 1 :]
        if a["started_at"] < b["finished_at"] and b["started_at"] < a["finished_at"]
    ]
    assert overlapping == []


async def test_an_update_whose_history_row_was_lost_is_recorded_by_the_next_apply(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    worker: Worker,
    cli_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # v2 reached Temporal but its history row did not reach Postgres; the operator then applied
    # v3 instead of re-running v2. v2's era must still be judged, and replayed, by v2.
    import cronwarden.schedules.apply as apply_module

    v1 = definition(schedule_id, every="2s", args={"write": True})
    v2 = definition(schedule_id, every="2s", args={"write": False})
    v3 = definition(schedule_id, every="2s", args={"write": False, "sleep": 0.1})
    handle, created_at = await apply_paused(client, pool, task_queue, v1)
    try:
        await wait_for(
            lambda: clock_past(created_at + timedelta(seconds=3)), timeout=30, what="v1's fires"
        )
        record = apply_module._record

        async def lost(*args: Any, **kwargs: Any) -> None:
            raise ConnectionError("Postgres went away after the write to Temporal")

        monkeypatch.setattr(apply_module, "_record", lost)
        with pytest.raises(Exception):  # noqa: B017 (whichever way apply reports it)
            await apply_definitions(client, pool, [v2], task_queue=task_queue)
        monkeypatch.setattr(apply_module, "_record", record)
        v2_written = (await handle.describe()).info.last_updated_at
        assert v2_written is not None
        await wait_for(
            lambda: clock_past(v2_written + timedelta(seconds=6)), timeout=30, what="v2's fires"
        )
        await apply_definitions(client, pool, [v3], task_queue=task_queue)
        digests = [digest for _, digest in await _history(pool, schedule_id)]
        assert len(digests) == 3
        v3_at = (await _history(pool, schedule_id))[-1][0]
        v2_era = [
            t
            for t in even_slots(created_at, v3_at)
            if v2_written.replace(microsecond=0) < t <= v3_at.replace(microsecond=0)
        ]
        assert len(v2_era) >= 2
        window = ["--start", iso(created_at - timedelta(minutes=1)), "--end", iso(v3_at)]
        await cli_json(
            cli_env, "backfill", "run", schedule_id, *window, "--include-paused", timeout=120
        )
    finally:
        await handle.delete()
    replayed = await _outbox_digests(pool, schedule_id)
    assert {t: replayed.get(t) for t in v2_era} == {t: v2.args_digest() for t in v2_era}
