"""Paging on the worst day (issue 32, items 1 and 2), with a real monitor, real Postgres and real
local HTTP sinks.

- **The fleet page's bytes per sink**: 10,000 schedules go overdue at once; one monitor pass
  opens the system incident and pages a webhook, Slack and PagerDuty receiver. Each body is set
  beside the same page unbounded (every member listed, the summary joining every id), rendered
  the way the monitor rendered it before pages were bounded.
- **40 pages with one sink hanging vs none**: 40 schedules overdue, each paged on its own, to
  PagerDuty and a webhook; the webhook either answers at once or accepts the connection and
  never answers. The monitor runs its loop at the issue's timings scaled down 5x (a pass every
  3 s, a 2 s send timeout); the figures are the time until every PagerDuty trigger was
  delivered, and the time a new incident's trigger took once those were out.
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import AbstractContextManager, suppress
from statistics import median
from typing import Any

from bench.stack import BenchStack, run_alone
from bench.table import Row
from cronwarden.config import Settings
from cronwarden.monitor.passes import Monitor, options_from_settings
from cronwarden.monitor.process import sinks_from_settings
from cronwarden.monitor.sinks import json_body, pagerduty, slack, webhook
from cronwarden.monitor.sinks.pagerduty import pagerduty_event
from cronwarden.store.pool import connect
from tests.support.sink_servers import BlackHole, SizedReceiver

FLEET, QUICK_FLEET = 10_000, 500
PAGES, QUICK_PAGES = 40, 10
INTERVAL = 3.0
SEND_TIMEOUT = 2.0
SLACK_PATH = "/slack/T0/B0/bench"
ROUTING_KEY = "bench-routing-key"
LIMITS = {
    "webhook": webhook.DEFAULT_MAX_BODY,
    "slack": slack.MAX_BODY,
    "pagerduty": pagerduty.MAX_BODY,
}

_STAGE = """
INSERT INTO cronwarden.heartbeats (schedule_id, next_expected_at, grace, last_success_at, paused)
SELECT $1 || '-' || lpad(i::text, 5, '0'), now() - interval '1 hour', interval '1 minute',
       now() - interval '2 hours', false
  FROM generate_series(0, $2 - 1) AS i
"""


async def _stage(dsn: str, prefix: str, n: int) -> None:
    conn = await connect(dsn)
    try:
        await conn.execute(_STAGE, prefix, n)
    finally:
        await conn.close()


def _monitor(dsn: str, **values: Any) -> Monitor:
    settings = Settings.model_validate({"database_url": dsn, **values})
    return Monitor(
        dsn=settings.dsn,
        sinks=sinks_from_settings(settings),
        options=options_from_settings(settings, interval=INTERVAL),
    )


# The fleet page -------------------------------------------------------------------------------


def _unbounded(members: list[dict[str, Any]], *, system: dict[str, Any]) -> dict[str, bytes]:
    """The fleet page as the monitor built it before pages were bounded: every member listed,
    the summary and details naming every id; per sink, the body it rendered then."""
    ids = [m["schedule_id"] for m in members]
    message = {
        "event": "trigger",
        "incident_id": system["id"],
        "kind": "system",
        "schedule_id": None,
        "summary": f"{len(ids)} schedules went overdue together: {', '.join(ids)}",
        "details": {"schedule_ids": ids},
        "schedules": members,
        "opened_at": None,
        "resolved_at": None,
        "resolution": None,
        "dedup_key": "cronwarden:system",
    }
    title = f":rotating_light: cronwarden system: {message['summary']}"
    lines = [f"*{title}*", *(f"• `{m['schedule_id']}` {m['summary']}" for m in members)]
    section = "\n".join(lines)[:2899] + "…"
    return {
        "webhook": json_body(message),
        "slack": json_body(
            {
                "text": title,
                "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": section}}],
            }
        ),
        "pagerduty": json_body(pagerduty_event(message, routing_key=ROUTING_KEY)),
    }


async def _members(dsn: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    conn = await connect(dsn)
    try:
        system = dict(
            await conn.fetchrow("SELECT * FROM cronwarden.incidents WHERE kind = 'system'")
        )
        rows = await conn.fetch(
            "SELECT schedule_id, kind, summary FROM cronwarden.incidents WHERE parent_id = $1"
            " ORDER BY id",
            system["id"],
        )
    finally:
        await conn.close()
    return system, [dict(r) for r in rows]


async def _fleet_page(stack: BenchStack, members: int) -> list[Row]:
    dsn = stack.dsn_for("paging_fleet")
    await _stage(dsn, "fleet", members)
    paths = {"webhook": "/hook", "slack": SLACK_PATH, "pagerduty": "/pd"}
    with SizedReceiver({}) as receiver:
        monitor = _monitor(
            dsn,
            alert_webhook_url=receiver.url("/hook"),
            slack_webhook_url=receiver.url(SLACK_PATH),
            pagerduty_routing_key=ROUTING_KEY,
            pagerduty_url=receiver.url("/pd"),
            status_page_url="https://status.example/cronwarden",
        )
        try:
            started = time.monotonic()
            await monitor.run_pass()
            pass_seconds = time.monotonic() - started
        finally:
            await monitor.close()
        sent = {sink: [s.raw for s in receiver.at(path)] for sink, path in paths.items()}
    system, listed = await _members(dsn)
    before = _unbounded(listed, system=system)
    rows = []
    for sink in ("pagerduty", "slack", "webhook"):
        bodies = sent[sink]
        size = len(bodies[0]) if len(bodies) == 1 else None
        body = json.loads(bodies[0]) if bodies else {}
        named = body.get("schedules_total") or body.get("payload", {}).get(
            "custom_details", {}
        ).get("schedules_total")
        rows.append(
            Row(
                metric=f"fleet page to {sink}, {members:,} schedules overdue: bytes",
                ours=f"{size:,} B" if size is not None else f"{len(bodies)} bodies",
                baseline=f"{len(before[sink]):,} B (every member listed, as before)",
                ratio=f"{size / len(before[sink]):.3f}x" if size else "-",
                goal=f"one body <= {LIMITS[sink]:,} B",
                met=size is not None and size <= LIMITS[sink],
            )
        )
        if sink == "webhook":
            rows.append(
                Row(
                    metric=f"fleet page, {members:,} schedules: the pass that opened and sent it",
                    ours=f"{pass_seconds:.2f} s",
                    baseline=f"count in the webhook body: {named}",
                    goal="counts every schedule",
                    met=named == members,
                )
            )
    return rows


# 40 pages, one sink hanging ---------------------------------------------------------------------


async def _pd_triggers(receiver: SizedReceiver) -> set[str]:
    return {
        s.body["dedup_key"]
        for s in receiver.at("/pd", accepted_only=True)
        if s.body["event_action"] == "trigger"
    }


async def _until(check: Any, *, timeout: float) -> float | None:
    """Seconds until `check()` holds (polled every 20 ms), None past `timeout`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if await check():
            return time.monotonic() - started
        await asyncio.sleep(0.02)
    return None


async def _run_pages(
    stack: BenchStack, pages: int, *, hanging: bool
) -> tuple[float | None, float | None, int]:
    """(seconds until every PagerDuty trigger was out, seconds for a new incident's trigger,
    sends the webhook saw)."""
    dsn = stack.dsn_for("paging_hang" if hanging else "paging_healthy")
    await _stage(dsn, "page", pages)
    hole: AbstractContextManager[Any] = BlackHole("accept") if hanging else SizedReceiver({})
    with SizedReceiver({}) as pd, hole as hook:
        monitor = _monitor(
            dsn,
            alert_webhook_url=hook.url("/hook"),
            pagerduty_routing_key=ROUTING_KEY,
            pagerduty_url=pd.url("/pd"),
            monitor_system_min_schedules=100_000,
            monitor_send_timeout_seconds=SEND_TIMEOUT,
        )
        stop = asyncio.Event()

        async def loop() -> None:
            # What `cronwarden monitor` does: a pass, then wait out the interval.
            while not stop.is_set():
                await monitor.step()
                with suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=INTERVAL)

        running = asyncio.create_task(loop())
        try:

            async def all_out() -> bool:
                return len(await _pd_triggers(pd)) >= pages

            everything = await _until(all_out, timeout=120)
            await _stage(dsn, "late", 1)

            async def late_out() -> bool:
                return "cronwarden:late-00000" in await _pd_triggers(pd)

            late = await _until(late_out, timeout=120)
        finally:
            stop.set()
            await running
            await monitor.close()
        tried = len(hook.at("/hook"))
    return everything, late, tried


def _seconds(value: float | None) -> str:
    return "not within 120 s" if value is None else f"{value:.2f} s"


def _median(values: list[float | None]) -> float | None:
    """The median, or None when any run never got there."""
    done = [v for v in values if v is not None]
    return median(done) if len(done) == len(values) else None


async def _hanging(stack: BenchStack, pages: int) -> list[Row]:
    runs = max(1, min(stack.repeat, 3))
    hung = [await _run_pages(stack, pages, hanging=True) for _ in range(runs)]
    healthy = [await _run_pages(stack, pages, hanging=False) for _ in range(runs)]
    timings = f"pass every {INTERVAL:g} s, send timeout {SEND_TIMEOUT:g} s"
    rows = []
    for i, what, goal in (
        (0, f"{pages} PagerDuty triggers delivered", INTERVAL),
        (1, "a new incident's PagerDuty trigger delivered", 2 * INTERVAL + SEND_TIMEOUT),
    ):
        ours, base = _median([h[i] for h in hung]), _median([h[i] for h in healthy])
        worst = [h[i] for h in hung]
        rows.append(
            Row(
                metric=f"{what}, webhook black-holed vs healthy ({timings})",
                ours=_seconds(ours),
                baseline=f"{_seconds(base)} (webhook healthy)",
                ratio=f"{ours / max(base, 1e-3):.2f}x" if ours and base else "-",
                goal=f"< {goal:g} s",
                met=all(v is not None and v < goal for v in worst),
            )
        )
    rows.append(
        Row(
            metric=f"sends to the black-holed webhook in that run ({pages + 1} pages queued)",
            ours=f"{median([h[2] for h in hung]):g}",
            baseline=f"{median([h[2] for h in healthy]):g} (webhook healthy)",
            goal="a few, then one probe per cool-down",
        )
    )
    return rows


async def measure(stack: BenchStack, *, quick: bool) -> list[Row]:
    members = QUICK_FLEET if quick else FLEET
    pages = QUICK_PAGES if quick else PAGES
    rows = await _fleet_page(stack, members)
    # Times mean nothing in --quick mode: only the sizes are judged there.
    rows += [
        Row(r.metric, r.ours, r.baseline, r.ratio, r.goal, None if quick else r.met)
        for r in await _hanging(stack, pages)
    ]
    return rows


if __name__ == "__main__":
    run_alone(measure, __doc__)
