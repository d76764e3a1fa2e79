"""The partitioned outbox on a real Postgres: months created ahead, a commit at any instant,
whole months dropped past the dedupe horizon while fires commit, an existing outbox of a
million records converted while a worker commits, and the horizon `backfill` and `audit` keep."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from cronwarden.activities.contract import logical_key
from cronwarden.embedded import EmbeddedPostgres
from cronwarden.monitor.outbox_upkeep import OutboxUpkeep
from cronwarden.store import outbox_partitions
from cronwarden.store.migrate import migrate
from cronwarden.store.pool import connect, create_pool
from cronwarden.store.runs import commit_run
from tests.support.cli import cli
from tests.support.outbox_fires import Committer, commit_fire, commit_record, fill
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.integration

_WHERE = "SELECT tableoid::regclass::text FROM cronwarden.outbox WHERE logical_key = $1"


def month_name(t: datetime) -> str:
    return f"cronwarden_outbox.outbox_{t:%Y_%m}"


async def names(conn: asyncpg.Connection) -> list[str]:
    return [p["name"] for p in await outbox_partitions.partitions(conn)]


async def test_months_are_created_ahead_and_every_instant_has_a_partition(
    database: str, pool: asyncpg.Pool
) -> None:
    async with pool.acquire() as conn:
        now = await conn.fetchval("SELECT now()")
        this_month = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        ahead = [this_month]
        for _ in range(outbox_partitions.MONTHS_AHEAD):
            ahead.append((ahead[-1] + timedelta(days=32)).replace(day=1))
        found = await names(conn)
        assert found[: len(ahead)] == [month_name(m) for m in ahead]
        assert found[-1] == "cronwarden_outbox.outbox_default"

        # A month missing (a monitor down for long): the monitor's next upkeep creates it.
        await conn.execute(f"DROP TABLE {month_name(ahead[-1])}")
    upkeep = OutboxUpkeep(database, timedelta(days=400), timeout=30)
    done = await upkeep.maybe_run()
    assert done is not None and done.created == [month_name(ahead[-1]).split(".")[1]]
    assert done.dropped == []
    assert await upkeep.maybe_run() is None  # not due again before its interval

    # A fire now lands in its month; year 1 and 9999 in the default partition; each once.
    schedule = f"s-{uuid.uuid4().hex[:8]}"
    for fire, where in (
        (now.replace(microsecond=0), month_name(now.astimezone(UTC))),
        (datetime(1, 1, 1, tzinfo=UTC), "cronwarden_outbox.outbox_default"),
        (datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC), "cronwarden_outbox.outbox_default"),
    ):
        key = logical_key(schedule, fire)
        first = await commit_fire(pool, schedule, fire)
        assert first is not None and first.recorded
        assert await commit_fire(pool, schedule, fire) is None  # done, seen at the lease
        async with pool.acquire() as conn:
            assert [r[0] for r in await conn.fetch(_WHERE, key)] == [where]
            # A commit that got past the lease anyway (the last line of defence): nothing.
            await conn.execute(
                "INSERT INTO cronwarden.locks (name, holder, attempt, token, expires_at,"
                " acquired_at) VALUES ($1, 'h', 1, 7, now() + interval '1 minute', now())",
                f"manual:{key}",
            )
            again = await commit_run(
                conn, commit_record(f"manual:{key}", 7, schedule, fire, args_digest="other")
            )
            assert again.fenced and not again.recorded
            assert (
                await conn.fetchval(
                    "SELECT count(*) FROM cronwarden.outbox WHERE logical_key = $1", key
                )
                == 1
            )


async def test_a_month_past_the_horizon_is_dropped_whole_while_fires_commit(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        # Two old months, as an installation running since 2020 would hold them.
        for month, following in (("2020_01", "2020-02-01"), ("2020_02", "2020-03-01")):
            start = f"{month.replace('_', '-')}-01"
            await conn.execute(
                f"CREATE TABLE cronwarden_outbox.outbox_{month} PARTITION OF cronwarden.outbox"
                f" FOR VALUES FROM ('{start} 00:00+00') TO ('{following} 00:00+00')"
            )
        await fill(
            conn,
            rows=3000,
            schedules=10,
            start=datetime(2020, 1, 1, tzinfo=UTC),
            step=timedelta(hours=3),
        )
        assert await conn.fetchval("SELECT count(*) FROM cronwarden_outbox.outbox_2020_02") > 0
        with pytest.raises(asyncpg.RaiseError, match="at least 7 days"):
            await outbox_partitions.drop_past(conn, timedelta(days=1))

        committer = Committer(
            pool,
            f"live-{uuid.uuid4().hex[:6]}",
            start=await conn.fetchval("SELECT date_trunc('second', now())"),
        )
        committer.begin()
        try:
            await committer.until(20, what="fires committing")
            # 2020-02 is inside a horizon reaching back to 2020-02-15; 2020-01 is not.
            horizon = await conn.fetchval("SELECT now() - '2020-02-15 00:00+00'::timestamptz")
            assert await outbox_partitions.drop_past(conn, horizon) == ["outbox_2020_01"]
            count_then = len(committer.committed)
            await committer.until(count_then + 20, what="fires committing after the drop")
        finally:
            await committer.stop()
        assert committer.errors == [] and committer.duplicates == []
        assert "cronwarden_outbox.outbox_2020_01" not in await names(conn)
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM cronwarden.outbox WHERE fire_time < '2020-02-01 00:00+00'"
            )
            == 0
        )
        assert await conn.fetchval(
            "SELECT count(*) FROM cronwarden.outbox WHERE schedule_id = $1",
            committer.schedule_id,
        ) == len(committer.committed)


MILLION = 1_000_000


async def test_an_outbox_of_a_million_records_converts_while_a_worker_commits(
    postgres_server: EmbeddedPostgres,
) -> None:
    name = f"t_{uuid.uuid4().hex[:16]}"
    postgres_server.create_database(name)
    dsn = postgres_server.dsn(name)
    conn = await connect(dsn)
    pool = await create_pool(dsn, max_size=4)
    try:
        await migrate(conn, through=18)
        assert (
            await conn.fetchval(
                "SELECT relkind::text FROM pg_class WHERE oid = 'cronwarden.outbox'::regclass"
            )
            == "r"
        )
        # Two years of 1,370 schedules firing hourly, the newest an hour ago.
        started = await conn.fetchval(
            "SELECT date_trunc('hour', now()) - make_interval(hours => $1)", MILLION // 1370 + 1
        )
        await fill(conn, rows=MILLION, schedules=1370, start=started, step=timedelta(hours=1))
        await conn.execute("ANALYZE cronwarden.outbox")

        committer = Committer(
            pool, "live", start=await conn.fetchval("SELECT date_trunc('second', now())")
        )
        # And replays of old keys, every one of which must be found done.
        replays = [started + timedelta(hours=h) for h in range(0, 700, 7)]
        committer.begin()
        try:
            await committer.until(20, what="fires committing")
            applied = await migrate(conn)
            assert [m.version for m in applied][-1] >= 19
            for fire in replays:
                assert await commit_fire(pool, "fleet-0", fire) is None
            count_then = len(committer.committed)
            await committer.until(count_then + 20, what="fires committing after the migration")
        finally:
            await committer.stop()

        assert committer.errors == [] and committer.duplicates == []
        assert (
            await conn.fetchval(
                "SELECT relkind::text FROM pg_class WHERE oid = 'cronwarden.outbox'::regclass"
            )
            == "p"
        )
        parts = await names(conn)
        assert parts[0].startswith("cronwarden_outbox.outbox_before_")
        total, distinct = await conn.fetchrow(
            "SELECT count(*), count(DISTINCT logical_key) FROM cronwarden.outbox"
        )
        assert total == distinct == MILLION + len(committer.committed)
        live = await conn.fetch(
            "SELECT logical_key FROM cronwarden.outbox WHERE schedule_id = 'live'"
        )
        assert sorted(r[0] for r in live) == sorted(committer.committed)
        # The conversion's scaffolding is gone, and migrate has nothing left to do.
        assert await conn.fetchval("SELECT to_regclass('cronwarden.outbox_conversion')") is None
        assert await migrate(conn) == []
    finally:
        await pool.close()
        await conn.close()


async def test_backfill_and_audit_refuse_a_window_past_the_horizon(
    cli_env: dict[str, str],
) -> None:
    env = cli_env | {"CRONWARDEN_OUTBOX_RETENTION": "30d"}
    for args in (
        ("backfill", "plan", "nightly", "--start", "-40d", "--end", "now"),
        ("backfill", "run", "nightly", "--start", "-40d", "--end", "-35d"),
        ("audit", "nightly", "--since", "40d"),
    ):
        result = await cli(env, *args)
        assert result.code == 2, (args, result.stdout, result.stderr)
        assert "dedupe horizon" in result.stderr, result.stderr
        assert "--past-horizon" in result.stderr
    # Allowed past it, a run still replays nothing before it: here, nothing at all.
    result = await cli(
        env, "backfill", "run", "nightly", "--start", "-40d", "--end", "-35d", "--past-horizon"
    )
    assert result.code == 0, result.stderr
    assert "nothing to replay" in result.stdout
    assert "never replayed" in result.stderr


async def test_the_runtime_role_keeps_the_months_but_never_reaches_a_record_but_by_the_outbox(
    database: str,
) -> None:
    admin = await connect(database)
    try:
        await admin.execute((REPO_ROOT / "deploy" / "sql" / "roles.sql").read_text())
        this_month = month_name(datetime.now(UTC)).split(".")[1]
        await admin.execute(f"DROP TABLE cronwarden_outbox.{this_month}")
    finally:
        await admin.close()
    parts = urlsplit(database)
    runtime = await connect(
        urlunsplit(parts._replace(netloc=f"cronwarden_runtime@{parts.hostname}:{parts.port}"))
    )
    try:
        # The monitor's upkeep, as the monitor runs it: the functions act as their owner.
        done = await outbox_partitions.upkeep(runtime, timedelta(days=400))
        assert done.created == [this_month] and done.dropped == []
        with pytest.raises(asyncpg.RaiseError, match="at least 7 days"):
            await outbox_partitions.drop_past(runtime, timedelta(days=6))
        for statement in (
            f"DELETE FROM cronwarden_outbox.{this_month}",
            "TRUNCATE cronwarden_outbox.outbox_default",
            f"DROP TABLE cronwarden_outbox.{this_month}",
            "DELETE FROM cronwarden.outbox",
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await runtime.execute(statement)
    finally:
        await runtime.close()


async def test_the_monitor_process_recreates_a_missing_month(
    database: str, pool: asyncpg.Pool, cli_env: dict[str, str]
) -> None:
    # The upkeep runs in `cronwarden monitor` itself (here its `--once`), not only in tests.
    async with pool.acquire() as conn:
        ahead = [p for p in await names(conn) if not p.endswith("_default")][-1]
        await conn.execute(f"DROP TABLE {ahead}")
        assert ahead not in await names(conn)
    result = await cli(cli_env, "monitor", "--once")
    assert result.code == 0, result
    async with pool.acquire() as conn:
        assert ahead in await names(conn)


async def test_months_created_from_several_connections_at_once_all_succeed(
    database: str, pool: asyncpg.Pool
) -> None:
    # `migrate` beside the monitor's upkeep, or two monitors: the loser of a race for a month
    # finds it made, and its call (and the drop that follows it in the upkeep) goes on.
    async with pool.acquire() as conn:
        for name in [p for p in await names(conn) if not p.endswith("_default")][1:]:
            await conn.execute(f"DROP TABLE {name}")

    async def create() -> None:
        async with pool.acquire() as conn:
            await conn.fetch(
                "SELECT cronwarden.create_outbox_partitions(now() + interval '6 months')"
            )

    await asyncio.gather(*(create() for _ in range(4)))
    async with pool.acquire() as conn:
        assert len([p for p in await names(conn) if not p.endswith("_default")]) >= 7
