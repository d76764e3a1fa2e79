"""The status page, served by a running monitor on real Temporal and Postgres: a worker outage
shows as missing slots, the backfill that fills them (beside the live fires that resume) shows
as replayed, and a browser loads the page without a console error."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import re
import shutil
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from html import unescape
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio
from pydantic import SecretStr
from temporalio.client import Client

from cronwarden.activities.contract import parse_fire_time
from cronwarden.backfill.plan import load_managed
from cronwarden.backfill.replay import replay_all
from cronwarden.config import Settings
from cronwarden.embedded import EmbeddedTemporal, free_port
from cronwarden.monitor.grids import RefreshPolicy
from cronwarden.monitor.http import monitor_app, serve_monitor
from cronwarden.monitor.metrics import Metrics
from cronwarden.monitor.page import PageAccess, StatusPage
from cronwarden.monitor.process import run_monitor
from cronwarden.monitor.status_view import PageLimits
from cronwarden.schedules.apply import apply_definitions
from tests.support.browser import CHROMEDRIVER, CHROMIUM, chromium, load, needs_chromium
from tests.support.holding_proxy import HoldingProxy
from tests.support.http_probe import http_get_text
from tests.support.outage import terminate_running
from tests.support.paths import REPO_ROOT
from tests.support.schedules import definition
from tests.support.scratch_watch import scratch_ever, scratch_now, settled
from tests.support.servers import TEST_JOBS, in_process_worker
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

SCREENSHOT = REPO_ROOT / "docs" / "images" / "status-page.png"
CAUSES_SCREENSHOT = REPO_ROOT / "docs" / "images" / "status-page-causes.png"
_SLOT = re.compile(r'data-state="([a-z-]+)"\s+data-key="([^"]+)"')
_ROW = re.compile(r'<tr data-schedule="([^"]+)" data-health="([a-z]+)">')


@dataclass
class Served:
    port: int
    settings: Settings

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def page_settings(
    temporal_server: EmbeddedTemporal, database: str, task_queue: str, **values: object
) -> Settings:
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        temporal_address=temporal_server.address,
        database_url=SecretStr(database),
        task_queue=task_queue,
        jobs=TEST_JOBS,
        temporal_ui_url="http://127.0.0.1:8233",
        **values,  # type: ignore[arg-type]
    )


@pytest_asyncio.fixture(loop_scope="session")
async def served(
    temporal_server: EmbeddedTemporal, database: str, task_queue: str
) -> AsyncIterator[Served]:
    served = Served(free_port(), page_settings(temporal_server, database, task_queue))
    async with monitoring(served):
        yield served


class monitoring:
    """A monitor serving `served.port` for the life of the block."""

    def __init__(self, served: Served) -> None:
        self._served = served
        self._stop = asyncio.Event()
        self._task: asyncio.Task[object] | None = None

    async def __aenter__(self) -> None:
        self._task = asyncio.create_task(
            run_monitor(
                self._served.settings,
                interval=0.5,
                metrics_port=self._served.port,
                metrics_host="127.0.0.1",
                stop=self._stop,
                handle_signals=False,
            )
        )

        async def answering() -> bool:
            return (await http_get_text(self._served.port, "/healthz"))[0] == 200

        await wait_for(answering, timeout=30, what="the monitor's HTTP port")

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._task is not None
        await asyncio.wait_for(self._task, timeout=30)


async def slot_states(port: int, schedule_id: str, path: str = "/") -> dict[str, str]:
    """{logical key: state} of the schedule's slots on the page."""
    status, html = await http_get_text(port, path)
    assert status == 200, html
    return {key: state for state, key in _SLOT.findall(html) if key.startswith(f"{schedule_id}@")}


async def committed_count(pool: asyncpg.Pool, schedule_id: str) -> int:
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM cronwarden.outbox WHERE schedule_id = $1", schedule_id
        )
    )


async def test_a_worker_outage_shows_missing_slots_and_the_backfill_beside_live_fires_fills_them(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    served: Served,
    tmp_path: Path,
) -> None:
    # Every 2 s; a short grace, so a slot with nothing to show turns missing after 5 s.
    await apply_definitions(
        client, pool, [definition(schedule_id, heartbeat_grace="5s")], task_queue=task_queue
    )
    try:
        async with in_process_worker(client, pool, task_queue):

            async def two_committed() -> bool:
                return await committed_count(pool, schedule_id) >= 2

            await wait_for(two_committed, timeout=60, what="two live fires committed")

        # The outage: no worker. Temporal keeps firing; the first fire's run waits for a worker
        # and the overlap policy skips the fires behind it.
        async def some_missing() -> dict[str, str] | None:
            states = await slot_states(served.port, schedule_id)
            return states if list(states.values()).count("missing") >= 2 else None

        during = await wait_for(some_missing, timeout=60, what="missing slots on the page")
        assert during is not None
        assert "committed" in during.values()
        missing = sorted(k for k, state in during.items() if state == "missing")

        if CHROMIUM is not None and CHROMEDRIVER is not None:
            shot = tmp_path / "status-page.png"
            with chromium(tmp_path / "profile") as driver:
                seen = await asyncio.to_thread(load, driver, served.url(), screenshot=shot)
                detail = await asyncio.to_thread(
                    load, driver, served.url(f"/schedules/{schedule_id}")
                )
            assert seen.console_errors == [] and detail.console_errors == []
            assert "missing" in seen.states and "committed" in seen.states
            assert "missing" in detail.states
            if os.environ.get("WRITE_DOCS_SCREENSHOT"):
                SCREENSHOT.parent.mkdir(exist_ok=True)
                shutil.copyfile(shot, SCREENSHOT)

                # The schedule's own page once the background rounds have judged its missing
                # slots: each with its cause and the command that closes its gap.
                async def causes_shown() -> bool:
                    status, html = await http_get_text(served.port, f"/schedules/{schedule_id}")
                    return status == 200 and "cronwarden backfill run" in html

                await wait_for(causes_shown, timeout=60, what="causes on the schedule's page")
                with chromium(tmp_path / "profile-causes") as driver:
                    await asyncio.to_thread(
                        load,
                        driver,
                        served.url(f"/schedules/{schedule_id}"),
                        screenshot=CAUSES_SCREENSHOT,
                    )

        # The worker is back and live fires resume; the backfill replays exactly the slots the
        # page called missing, beside them.
        async with in_process_worker(client, pool, task_queue):
            schedule = await load_managed(client, schedule_id)
            times = [parse_fire_time(k.split("@", 1)[1]) for k in missing]
            summary = await replay_all(client, schedule, times, concurrency=4, lock_wait=60)
            assert summary.failures == [], summary

            async def replayed() -> dict[str, str] | None:
                states = await slot_states(served.port, schedule_id, f"/schedules/{schedule_id}")
                return states if all(states.get(k) == "replayed" for k in missing) else None

            await wait_for(replayed, timeout=60, what="the missing slots replayed")
            last_missing = parse_fire_time(missing[-1].split("@", 1)[1])

            async def live_fires_resumed() -> bool:
                # Schedule-fired commits after the outage, beside the replays.
                return bool(
                    await pool.fetchval(
                        "SELECT count(*) FROM cronwarden.outbox WHERE schedule_id = $1"
                        " AND fire_time > $2 AND workflow_id NOT LIKE '%~replay-%'",
                        schedule_id,
                        last_missing,
                    )
                )

            await wait_for(live_fires_resumed, timeout=60, what="a live fire after the outage")
        after = await slot_states(served.port, schedule_id, f"/schedules/{schedule_id}")
        assert all(after[k] == "replayed" for k in missing)
        later = [k for k in after if k > missing[-1]]
        assert any(after[k] == "committed" for k in later), after
    finally:
        await client.get_schedule_handle(schedule_id).delete()


_MISSING_ROW = re.compile(r'<tr data-state="missing">(.*?)</tr>', re.S)


def missing_rows(html: str) -> dict[str, tuple[str | None, str | None]]:
    """{logical key: (cause sentence, closing command)} of a schedule page's missing slots;
    (None, None) while a slot's cause is pending."""
    found = {}
    for row in _MISSING_ROW.findall(html):
        key = unescape(re.findall(r"<td><code>([^<]+)</code></td>", row)[0])
        cause = re.search(r'<div class="cause" data-cause="[^"]+">([^<]*)</div>', row)
        command = re.search(r'<code class="next-command">([^<]*)</code>', row)
        found[key] = (
            unescape(cause.group(1)) if cause else None,
            unescape(command.group(1)) if command else None,
        )
    return found


async def test_a_missing_slot_shows_its_cause_and_the_command_that_closes_its_gap(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str, served: Served
) -> None:
    # No worker at all: the first fire's run waits, and the overlap policy skips the fires
    # behind it. Those slots turn missing after the short grace.
    await apply_definitions(
        client, pool, [definition(schedule_id, heartbeat_grace="5s")], task_queue=task_queue
    )
    handle = client.get_schedule_handle(schedule_id)
    path = f"/schedules/{schedule_id}"
    try:

        async def explained() -> dict[str, tuple[str | None, str | None]] | None:
            status, html = await http_get_text(served.port, path)
            assert status == 200, html
            rows = missing_rows(html)
            known = {k: v for k, v in rows.items() if v[0] is not None}
            return known or None

        found = await wait_for(explained, timeout=120, what="a missing slot's cause on its page")
        assert found is not None
    finally:
        await handle.pause()
        await terminate_running(client, handle)
        await handle.delete()
    key, (cause, command) = sorted(found.items())[0]
    assert cause is not None and "overlap policy" in cause, cause
    fire = key.split("@", 1)[1]
    assert command == f"cronwarden backfill run {schedule_id} --start {fire} --end {fire}"


async def test_the_page_answers_while_temporal_is_unreachable_from_postgres_alone(
    database: str, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    await pool.execute(
        "INSERT INTO cronwarden.heartbeats (schedule_id, last_success_at, next_expected_at)"
        " VALUES ($1, now() - interval '1 hour', now() - interval '1 hour')",
        schedule_id,
    )
    await pool.execute(
        "INSERT INTO cronwarden.outbox (logical_key, schedule_id, fire_time, attempt,"
        " fencing_token, worker, args_digest) VALUES ($1, $2, $3, 1, 1, 'w', 'd')",
        f"{schedule_id}@2026-12-01T00:00:00Z",
        schedule_id,
        datetime.fromisoformat("2026-12-01T00:00:00+00:00"),
    )
    nothing = f"127.0.0.1:{free_port()}"  # no Temporal listens here
    served = Served(
        free_port(),
        Settings(
            _env_file=None,  # type: ignore[call-arg]
            temporal_address=nothing,
            database_url=SecretStr(database),
            task_queue=task_queue,
        ),
    )
    async with monitoring(served):
        # The first load answers at once from Postgres, its timeline pending; once the
        # background read of Temporal has failed, the banner says so.
        status, first = await http_get_text(served.port, "/", timeout=30)

        async def with_banner() -> str:
            answer, html = await http_get_text(served.port, "/", timeout=30)
            return html if answer == 200 and 'id="temporal-error"' in html else ""

        html = await wait_for(with_banner, timeout=60, what="the Temporal banner")
    assert status == 200 and 'data-grid="pending"' in first
    assert f'data-key="{schedule_id}@2026-12-01T00:00:00Z"' in html
    assert 'data-health="incident"' in html or 'data-health="overdue"' in html
    # Nothing can be called missing without the grid.
    assert 'data-state="missing"' not in html


async def test_with_postgres_unreachable_the_page_says_so_and_the_probes_still_answer(
    temporal_server: EmbeddedTemporal, task_queue: str
) -> None:
    nothing = f"postgresql://postgres@127.0.0.1:{free_port()}/x"  # no Postgres listens here
    served = Served(free_port(), page_settings(temporal_server, nothing, task_queue))
    async with monitoring(served):
        status, text = await http_get_text(served.port, "/", timeout=30)
        assert (await http_get_text(served.port, "/healthz"))[0] == 200
    assert status == 503 and "cannot read the database" in text and "Traceback" not in text


async def test_a_token_guards_the_page_but_not_the_metrics(
    temporal_server: EmbeddedTemporal, database: str, task_queue: str
) -> None:
    served = Served(
        free_port(),
        page_settings(
            temporal_server, database, task_queue, status_page_token=SecretStr("s3cret-token")
        ),
    )
    async with monitoring(served):
        assert (await http_get_text(served.port, "/"))[0] == 401
        assert (await http_get_text(served.port, "/metrics"))[0] == 200
        bearer = await _get_with(served.port, "/", "Bearer s3cret-token")
        basic = base64.b64encode(b"anyone:s3cret-token").decode()
        browser = await _get_with(served.port, "/", f"Basic {basic}")
        wrong = await _get_with(served.port, "/", "Bearer nope")
        # A credential whose bytes are not UTF-8 is a wrong one, never an error.
        not_utf8 = [
            await request(served.port, "/", {"Authorization": value})
            for value in (
                b"Bearer \xff\xfe",
                b"Basic \xff\xfe",
                b"Basic " + base64.b64encode(b"me:\xff\xfe"),
                b"\xc3\x28 x",
            )
        ]
    assert (bearer, browser, wrong) == (200, 200, 401)
    assert [a.status for a in not_utf8] == [401] * 4


async def test_a_page_turned_off_is_not_served(
    temporal_server: EmbeddedTemporal, database: str, task_queue: str
) -> None:
    served = Served(
        free_port(), page_settings(temporal_server, database, task_queue, status_page="off")
    )
    async with monitoring(served):
        assert (await http_get_text(served.port, "/"))[0] == 404
        assert (await http_get_text(served.port, "/metrics"))[0] == 200


async def _get_with(port: int, path: str, authorization: str) -> int:
    return (await request(port, path, {"Authorization": authorization})).status


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


async def request(
    port: int, path: str, headers: Mapping[str, str | bytes] | None = None, *, method: str = "GET"
) -> Answer:
    """One request with exactly these headers (values may be raw bytes, UTF-8 or not)."""
    lines = [f"{method} {path} HTTP/1.1".encode(), f"Host: 127.0.0.1:{port}".encode()]
    for name, value in (headers or {}).items():
        lines.append(
            name.encode() + b": " + (value if isinstance(value, bytes) else value.encode())
        )
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"\r\n".join([*lines, b"Connection: close", b"", b""]))
    await writer.drain()
    raw = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        parsed[name.strip().lower()] = value.strip()
    return Answer(int(status_line.split()[1]), parsed, body)


async def test_what_a_run_or_an_incident_says_is_shown_as_text_never_as_markup(
    pool: asyncpg.Pool, served: Served, schedule_id: str
) -> None:
    script = "<script>alert(1)</script>"
    replay_error = "<b>a replay failed</b>"
    await pool.execute(
        "INSERT INTO cronwarden.heartbeats (schedule_id, next_expected_at, last_error,"
        " paused, paused_reason, last_replay_error, last_replay_error_key)"
        " VALUES ($1, now() + interval '1 hour', $2, true, $2, $3, 'k@2026-01-05T09:30:00Z')",
        schedule_id,
        script,
        replay_error,
    )
    _, overview = await http_get_text(served.port, "/")
    status, detail = await http_get_text(served.port, f"/schedules/{schedule_id}")
    assert status == 200
    for html in (overview, detail):
        assert script not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # A failed replay's error is shown apart from the live one, labelled as the replay's.
    assert replay_error not in detail and "&lt;b&gt;a replay failed&lt;/b&gt;" in detail
    assert "Last replay error (<code>k@2026-01-05T09:30:00Z</code>" in detail
    assert (await http_get_text(served.port, "/schedules/no-such-schedule"))[0] == 404
    for hostile in ("%FF%FE", "%00", "a" * 7000, "..%2F..%2Fetc"):
        assert (await request(served.port, f"/schedules/{hostile}")).status == 404, hostile


@needs_chromium
async def test_the_browser_check_runs_here() -> None:
    """The outage test above checks the page in Chromium only where both programs exist; this
    test makes their absence visible as a skip instead of a silent pass."""
    assert CHROMIUM is not None and CHROMEDRIVER is not None


async def test_forty_concurrent_page_loads_create_no_schedule_in_temporal(
    client: Client, pool: asyncpg.Pool, task_queue: str, served: Served
) -> None:
    # Jittered schedules: their nominal grids need a scratch copy each (Temporal lists only
    # jittered times). The copies are made once, by the page's background task.
    tag = uuid.uuid4().hex[:6]
    ids = [f"jittered-{tag}-{i}" for i in range(3)]
    defns = [definition(sid, every="1m", jitter="20s", heartbeat_grace="5m") for sid in ids]
    await apply_definitions(client, pool, defns, task_queue=task_queue)
    try:

        async def grids_known() -> bool:
            status, html = await http_get_text(served.port, "/")
            return status == 200 and all(
                f'data-schedule="{sid}" data-grid="known"' in html for sid in ids
            )

        await wait_for(grids_known, timeout=60, what="the grids read in the background")
        await settled(client)
        before = await scratch_ever(client)
        seen_during: set[str] = set()
        loads_done = asyncio.Event()

        async def watch() -> None:
            while not loads_done.is_set():
                seen_during.update(await scratch_now(client))
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
        paths = ["/", "/?page=1", *(f"/schedules/{sid}" for sid in ids)]
        answers = await asyncio.gather(
            *(http_get_text(served.port, paths[i % len(paths)], timeout=60) for i in range(40))
        )
        loads_done.set()
        await watcher
        await settled(client)
        after = await scratch_ever(client)
    finally:
        for sid in ids:
            await client.get_schedule_handle(sid).delete()
    assert [status for status, _ in answers] == [200] * 40
    assert seen_during == set()
    assert after - before == set(), "a page load created scratch schedules"
    assert await scratch_now(client) == set()


async def test_concurrent_loads_share_one_read_and_answer_while_temporal_is_mid_evaluation(
    client: Client,
    pool: asyncpg.Pool,
    database: str,
    temporal_server: EmbeddedTemporal,
    task_queue: str,
    schedule_id: str,
) -> None:
    await apply_definitions(client, pool, [definition(schedule_id)], task_queue=task_queue)
    # Temporal reached through a proxy that holds its answers: the background round that the
    # first load starts is stuck inside its evaluation while the loads are served.
    proxy = HoldingProxy(temporal_server.host, temporal_server.port)
    await proxy.start()
    held = await Client.connect(proxy.address)

    async def temporal() -> Client:
        return held

    page = StatusPage(
        database,
        temporal,
        access=PageAccess("local"),
        links=None,
        limits=PageLimits(fresh_for=600),
        refresh=RefreshPolicy(period=0.1, round_timeout=120),
    )
    app = monitor_app(Metrics(), healthy=lambda: True, page=page)
    port = free_port()
    try:
        proxy.hold()
        async with serve_monitor(app, host="127.0.0.1", port=port):
            # The first loads, all at once: one read serves them, and they wake the background
            # task, whose round then waits on Temporal.
            answers = await asyncio.gather(*(request(port, "/") for _ in range(20)))
            reads = page.reads

            async def mid_evaluation() -> bool:
                return page.refresher.in_round

            await wait_for(mid_evaluation, timeout=30, what="a background round in flight")
            page.forget_answers()
            during = await request(port, f"/schedules/{schedule_id}")
            proxy.release()

            async def known() -> bool:
                page.forget_answers()
                answer = await request(port, f"/schedules/{schedule_id}")
                return b'data-grid="known"' in answer.body

            await wait_for(known, timeout=60, what="the grid once Temporal answers")
        await page.close()
    finally:
        await proxy.stop()
        await client.get_schedule_handle(schedule_id).delete()
    assert [a.status for a in answers] == [200] * 20
    assert all(b'data-grid="pending"' in a.body for a in answers)
    assert reads == 1, "concurrent loads made more than one read"
    assert during.status == 200 and b'data-grid="pending"' in during.body


async def test_the_overview_shows_problems_first_a_page_at_a_time_with_counts(
    pool: asyncpg.Pool, served: Served
) -> None:
    tag = uuid.uuid4().hex[:6]
    # 240 healthy schedules whose ids sort first, then 10 overdue ones whose ids sort last:
    # by id alone the problems would be on page 3.
    await pool.execute(
        "INSERT INTO cronwarden.heartbeats (schedule_id, next_expected_at, grace)"
        " SELECT CASE WHEN i <= 240 THEN 'a-' || $1 || '-' || lpad(i::text, 3, '0')"
        "             ELSE 'z-' || $1 || '-' || i END,"
        "        CASE WHEN i <= 240 THEN now() + interval '1 hour'"
        "             ELSE now() - interval '1 hour' END,"
        "        interval '1 minute'"
        "   FROM generate_series(1, 250) AS i",
        tag,
    )
    _, first = await http_get_text(served.port, "/")
    _, third = await http_get_text(served.port, "/?page=3")
    rows_first = _ROW.findall(first)
    rows_third = _ROW.findall(third)
    assert len(rows_first) == 100 and len(rows_third) == 50
    assert [h for _, h in rows_first[:10]] == ["overdue"] * 10
    assert all(sid.startswith("z-") for sid, _ in rows_first[:10])
    assert all(h == "ok" for _, h in rows_first[10:] + rows_third)
    assert 'data-health-count="overdue">10 overdue' in first
    assert 'data-health-count="ok">240 ok' in first
    assert "page 1 of 3" in first and 'href="?page=2"' in first
    assert "page 3 of 3" in third and 'href="?page=2"' in third


@pytest.mark.parametrize(
    ("query", "status"),
    [
        ("?page=4", 404),
        ("?page=99999999999999999999", 404),
        ("?page=" + "9" * 5000, 400),
        ("?page=0", 400),
        ("?page=-1", 400),
        ("?page=1.5", 400),
        ("?page=%EF%BC%92", 400),  # a fullwidth digit two, which int() would take
        ("?page=%202", 400),
        ("?page=1&page=2", 400),
        ("?page=", 400),
        ("?page=2", 200),
        ("?other=x", 200),
    ],
)
async def test_a_page_number_that_names_no_page_is_refused_never_an_error(
    pool: asyncpg.Pool, served: Served, query: str, status: int
) -> None:
    await pool.execute(
        "INSERT INTO cronwarden.heartbeats (schedule_id, next_expected_at)"
        " SELECT 'many-' || i, now() + interval '1 hour' FROM generate_series(1, 150) AS i"
    )
    answer = await request(served.port, f"/{query}")
    assert answer.status == status, answer.body


async def test_every_answer_forbids_framing_and_foreign_content(served: Served) -> None:
    answer = await request(served.port, "/")
    refused = await request(served.port, "/", {"Sec-Fetch-Site": "cross-site"})
    for a in (answer, refused):
        policy = a.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
        assert "script-src" not in policy and "unsafe-inline" not in policy
        assert a.headers["referrer-policy"] == "no-referrer"
        assert a.headers["x-content-type-options"] == "nosniff"
    assert answer.status == 200
    # The one inline style is the one the policy's hash allows.
    style = re.search(rb"<style>(.*?)</style>", answer.body, re.S)
    assert style is not None
    digest = base64.b64encode(hashlib.sha256(style.group(1)).digest()).decode()
    assert f"style-src 'sha256-{digest}'" in answer.headers["content-security-policy"]
    assert b"<script" not in answer.body


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Sec-Fetch-Site": "cross-site"}, 403),
        ({"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, 403),
        ({"Origin": "http://attacker.example"}, 403),
        ({"Origin": "null"}, 403),
        ({"Origin": "http://127.0.0.1:1"}, 403),
        ({"Origin": b"http://\xff\xfe.example"}, 403),  # not UTF-8: refused, never an error
        ({"Sec-Fetch-Site": "same-origin"}, 200),
        ({"Sec-Fetch-Site": "none"}, 200),
    ],
)
async def test_a_cross_site_request_is_refused(
    served: Served, headers: dict[str, str | bytes], status: int
) -> None:
    assert (await request(served.port, "/", headers)).status == status
    detail = await request(served.port, "/schedules/no-such-schedule", headers)
    assert detail.status == (404 if status == 200 else status)


async def test_a_request_from_the_pages_own_origin_is_answered(served: Served) -> None:
    own = {"Origin": f"http://127.0.0.1:{served.port}"}
    assert (await request(served.port, "/", own)).status == 200


async def test_head_answers_like_get_and_other_methods_are_refused(served: Served) -> None:
    head = await request(served.port, "/", method="HEAD")
    assert head.status == 200 and head.body == b""
    for method in ("POST", "OPTIONS", "PUT", "DELETE"):
        refused = await request(served.port, "/", method=method)
        assert refused.status == 405, method
        assert refused.headers["allow"] == "GET, HEAD"
        assert "frame-ancestors 'none'" in refused.headers["content-security-policy"]


async def test_grids_read_before_temporal_went_away_are_kept_with_a_banner_saying_since_when(
    client: Client,
    pool: asyncpg.Pool,
    database: str,
    temporal_server: EmbeddedTemporal,
    task_queue: str,
    schedule_id: str,
) -> None:
    await apply_definitions(client, pool, [definition(schedule_id)], task_queue=task_queue)
    proxy = HoldingProxy(temporal_server.host, temporal_server.port)
    await proxy.start()
    through_proxy = await Client.connect(proxy.address)

    async def temporal() -> Client:
        return through_proxy

    page = StatusPage(
        database,
        temporal,
        access=PageAccess("local"),
        links=None,
        refresh=RefreshPolicy(period=0.2, round_timeout=3),
    )
    app = monitor_app(Metrics(), healthy=lambda: True, page=page)
    port = free_port()
    try:
        async with serve_monitor(app, host="127.0.0.1", port=port):

            async def page_with(*markers: bytes) -> bytes:
                page.forget_answers()
                answer = await request(port, f"/schedules/{schedule_id}")
                ok = answer.status == 200 and all(m in answer.body for m in markers)
                return answer.body if ok else b""

            await wait_for(
                lambda: page_with(b'data-grid="known"'), timeout=60, what="the grid read"
            )
            await proxy.stop()  # Temporal is gone: connections cut, new ones refused
            after = await wait_for(
                lambda: page_with(b'id="temporal-error"'), timeout=60, what="the banner"
            )
        await page.close()
    finally:
        await proxy.stop()
        await client.get_schedule_handle(schedule_id).delete()
    assert b'data-grid="known"' in after
    assert b"Temporal could not be asked since" in after
