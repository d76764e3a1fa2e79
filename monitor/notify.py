"""Delivery of persisted notifications: claim due rows, send them with no transaction open,
then mark each delivered (never sent again), failed (retried later, with exponential backoff up
to `retry_max`, for as long as it takes) or dead (given up on: only a payload the sink refused
as such, which no retry can get through). A sink that is down or misconfigured never loses a
page: its rows wait, and go out in order once it takes them again.

Each sink is delivered on its own (a lane): its own claims (only its own rows, in its own
order), its own time budget, its own sends in flight (`concurrency`) and its own circuit
breaker (`monitor.sinks.breaker`). The lanes of a pass run side by side, so a sink that hangs
costs only its own pages: another sink's new trigger never waits behind its timeouts or
retries. Within a sink, order per dedup key is the claim's (`store.notifications`): a resolve
never goes out before its trigger, however many sends are in flight.

A monitor killed mid-send leaves its row claimed but undelivered: the claim lapses after
`claim_seconds` and the next pass of any monitor sends it. That makes delivery at least once;
the delivery id (stable across retries) and PagerDuty's dedup_key let a receiver fold a repeat.
A live sender never loses its claim before it has marked the row (see `claim_seconds`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import asyncpg
from structlog.typing import FilteringBoundLogger

from cronwarden.logs import get_logger
from cronwarden.monitor.messages import with_labels, with_local_time
from cronwarden.monitor.metrics import Metrics
from cronwarden.monitor.sinks import BodyLimit, Http, Sink, SinkError, failure, send
from cronwarden.monitor.sinks.breaker import Breaker, State
from cronwarden.store import labels as label_store
from cronwarden.store import notifications
from cronwarden.store import zones as zone_store

log = get_logger("cronwarden.monitor")

T = TypeVar("T")

# A send starts only with at least this share of its timeout left in the pass. One cut shorter
# would mostly time out on a sink that is merely slow, and the claim counts it as an attempt:
# the row would back off for the pass's budget running out, not for the sink failing.
_MIN_SEND_SHARE = 0.5


@dataclass(frozen=True)
class DeliveryPolicy:
    send_timeout: float = 10.0
    """Total deadline of one HTTP request (DNS, connect, send, answer)."""
    retry_base: float = 5.0
    retry_max: float = 300.0
    batch: int = 100
    """At most this many deliveries per sink and pass, so one pass always ends."""
    database_timeout: float = 30.0
    """Bound of each database step of the delivery (claim, mark): taking a connection from the
    pool, the statement and giving the connection back (its reset is a round trip too), so a
    database that stops answering ends the pass with an error, never holds it for the minutes
    TCP takes to give up."""
    concurrency: int = 1
    """Sends in flight at once to one sink that answers (one at a time to one that has not).
    Above 1, pages of different dedup keys may arrive out of order; pages of one key never do."""
    breaker_failures: int = 3
    """Failed sends in a row that open a sink's circuit breaker."""
    breaker_cooldown: float = 30.0
    """How long an open breaker holds a sink's pages before one probe (at most `retry_max`)."""
    max_body: Mapping[str, int] = field(default_factory=dict)
    """Largest body per sink name where the settings say (the webhook's); else the sink's own."""

    @property
    def claim_seconds(self) -> float:
        # The claim must outlast everything its holder does with the row after the claim's
        # statement: the rest of the claim step (commit, giving the connection back), the send
        # (its total deadline, 413 retries included) and the marking step, each database step
        # bounded by `database_timeout`. A claim that lapsed before the mark lets another
        # replica send the page again while this one is still recording it.
        return self.send_timeout + 2 * self.database_timeout + 5

    @property
    def cooldown(self) -> float:
        # Never longer than the backoff ceiling: an open breaker must not hold a page longer
        # than the page's own backoff would have.
        return min(self.breaker_cooldown, self.retry_max)

    def retry_in(self, attempts: int) -> float:
        return float(min(self.retry_base * 2 ** max(attempts - 1, 0), self.retry_max))


@dataclass
class Lane:
    """What one monitor process keeps of one sink between passes: its breaker, the largest
    body it takes (lowered by every 413), and the send no pass waits for (see `_deliver_sink`)."""

    breaker: Breaker
    limit: BodyLimit
    hangs: bool = False
    """Its last send got no answer in time (and nothing answered since)."""
    unwaited: set[asyncio.Task[None]] = field(default_factory=set)

    async def aclose(self) -> None:
        """Let the send still running on its own end and record its outcome (it is bounded by
        its pass's deadline): a `--once` that cut it short would leave its row claimed, and
        unsendable by anyone, until the claim lapses."""
        await asyncio.gather(*self.unwaited, return_exceptions=True)


def new_lane(sink: Sink, policy: DeliveryPolicy) -> Lane:
    return Lane(
        breaker=Breaker(failures_to_open=policy.breaker_failures, cooldown=policy.cooldown),
        limit=BodyLimit(policy.max_body.get(sink.name, sink.max_body)),
    )


def lane_of(lanes: MutableMapping[str, Lane], sink: Sink, policy: DeliveryPolicy) -> Lane:
    if sink.name not in lanes:
        lanes[sink.name] = new_lane(sink, policy)
    return lanes[sink.name]


def delivery_id(*, incident_id: int, event: str, sink: str) -> str:
    """What a receiver folds repeats by: one per (incident, event, sink), the same on every
    retry of that notification."""
    return f"cronwarden:{incident_id}:{event}:{sink}"


@dataclass(frozen=True)
class _Pass:
    """What every lane of one delivery pass shares."""

    pool: asyncpg.Pool
    http: Http
    claimer: str
    policy: DeliveryPolicy
    metrics: Metrics
    deadline: float
    kept: bool
    """The lanes outlive this call (a monitor's): a send may run on without it."""


async def deliver_due(
    pool: asyncpg.Pool,
    sinks: Mapping[str, Sink],
    *,
    http: Http,
    claimer: str,
    policy: DeliveryPolicy,
    metrics: Metrics,
    deadline: float,
    lanes: MutableMapping[str, Lane] | None = None,
) -> int:
    """Send due notifications of this monitor's sinks, every sink in its own lane, each up to
    the batch and until `deadline` (monotonic), so a sink that times out on every request
    cannot hold up the next scan or another sink; returns how many were delivered. `lanes`:
    the breakers and limits kept between passes (None: fresh ones). Database errors propagate
    (once every lane has ended); sink errors never do."""
    kept: MutableMapping[str, Lane] = lanes if lanes is not None else {}
    shared = _Pass(pool, http, claimer, policy, metrics, deadline, kept=lanes is not None)
    results = await asyncio.gather(
        *(
            _deliver_sink(shared, sinks[name], lane_of(kept, sinks[name], policy))
            for name in sorted(sinks)
        ),
        return_exceptions=True,
    )
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return sum(r for r in results if isinstance(r, int))


async def _deliver_sink(run: _Pass, sink: Sink, lane: Lane) -> int:
    """One sink's lane: keep up to the breaker's allowance of sends in flight, claiming the
    sink's due rows as room frees up, until none is due, the batch is spent, the breaker opens
    or too little of the budget is left for another send. Sends in flight are awaited, never
    abandoned: each is bounded by the deadline.

    Except one: to a sink whose last send got no answer in time (a probe of an open breaker
    included), the one send it is allowed runs on without the pass waiting for it, and its
    outcome is recorded when it ends. A sink that hangs thus holds up a pass (and the scan of
    the next) once, when it stops answering, not on every retry or probe after that."""
    policy = run.policy
    delivered = claimed = 0
    in_flight: set[asyncio.Task[bool]] = set()
    drained = False
    error: BaseException | None = None
    try:
        while True:
            now = time.monotonic()
            allowed = lane.breaker.allowance(now, concurrency=policy.concurrency)
            room = allowed - len(in_flight) - len(lane.unwaited)
            enough_time = run.deadline - now >= policy.send_timeout * _MIN_SEND_SHARE
            if (
                error is None
                and not drained
                and room > 0
                and claimed < policy.batch
                and enough_time
            ):
                probing = lane.breaker.state(now) is State.HALF_OPEN
                try:
                    async with asyncio.timeout(policy.database_timeout), run.pool.acquire() as conn:
                        rows = await notifications.claim_due(
                            conn,
                            claimer=run.claimer,
                            claim_seconds=policy.claim_seconds,
                            sink=sink.name,
                            limit=min(room, policy.batch - claimed),
                        )
                        rows = await _with_local_times(conn, rows)
                        rows = await _with_labels(conn, rows)
                except Exception as exc:
                    error = exc
                    continue
                drained = not rows
                if rows and probing:
                    log.info("sink.breaker-probe", sink=sink.name, notification_id=rows[0].id)
                claimed += len(rows)
                suspect = run.kept and lane.hangs
                for row in rows:
                    if suspect:
                        _run_unwaited(run, sink, lane, row)
                    else:
                        in_flight.add(asyncio.create_task(_deliver_one(run, sink, lane, row)))
                continue
            if not in_flight:
                break
            done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task.exception() is not None:
                    error = error or task.exception()
                elif task.result():
                    delivered += 1
                    # A delivered page may be what the next page of its key waited for.
                    drained = False
    finally:
        for task in in_flight:
            task.cancel()
        await asyncio.gather(*in_flight, return_exceptions=True)
    if error is not None:
        raise error
    return delivered


async def _with_local_times(
    conn: Any, rows: list[notifications.Claimed]
) -> list[notifications.Claimed]:
    """The rows whose page names an expected fire of a zoned schedule, with its local time
    (`messages.with_local_time`); the zones from the definitions `apply` recorded (one query
    for the batch, none when no page names an expected fire)."""
    ids = sorted(
        {
            str(r.message["schedule_id"])
            for r in rows
            if r.message.get("schedule_id")
            and (r.message.get("details") or {}).get("next_expected_at")
        }
    )
    # Without its local time a page still goes out, in UTC.
    return await _amended(
        conn, rows, ids, zone_store.latest_zones, with_local_time, unread="notification.zone-unread"
    )


async def _with_labels(conn: Any, rows: list[notifications.Claimed]) -> list[notifications.Claimed]:
    """The rows of a labelled schedule's page with its labels (`messages.with_labels`), read
    at delivery from the definitions `apply` recorded (one query for the batch): a page goes
    out with the labels the schedule has when it is sent, so a relabel routes the next page."""
    ids = sorted({str(r.message["schedule_id"]) for r in rows if r.message.get("schedule_id")})
    # Without its labels a page still goes out (to each sink's default route).
    return await _amended(
        conn, rows, ids, label_store.latest_labels, with_labels, unread="notification.labels-unread"
    )


async def _amended(
    conn: Any,
    rows: list[notifications.Claimed],
    ids: list[str],
    read: Callable[[Any, list[str]], Awaitable[Mapping[str, T]]],
    amend: Callable[[Mapping[str, Any], T], dict[str, Any]],
    *,
    unread: str,
) -> list[notifications.Claimed]:
    """The rows, each whose schedule `read` (one query for the batch's `ids`) found something
    for with its message amended by it. What is read is an addition to a page: when it cannot
    be read, the rows go out as they are (logged as `unread`), never held back."""
    if not ids:
        return rows
    try:
        found = await read(conn, ids)
    except Exception as exc:
        log.warning(unread, error=f"{type(exc).__name__}: {exc}")
        return rows
    return [
        replace(r, message=amend(r.message, found[str(r.message["schedule_id"])]))
        if r.message.get("schedule_id") in found
        else r
        for r in rows
    ]


def _run_unwaited(run: _Pass, sink: Sink, lane: Lane, row: notifications.Claimed) -> None:
    """Send `row` on its own task, held by the lane (the next pass counts it in flight)."""

    async def sending() -> None:
        try:
            await _deliver_one(run, sink, lane, row)
        except Exception as exc:
            # Recording its outcome failed (the database): the claim lapses and the row is
            # sent again, as after a monitor killed mid-send.
            log.error(
                "notification.record-failed",
                notification_id=row.id,
                sink=row.sink,
                error=f"{type(exc).__name__}: {exc}",
            )

    task = asyncio.create_task(sending())
    lane.unwaited.add(task)
    task.add_done_callback(lane.unwaited.discard)


async def _deliver_one(run: _Pass, sink: Sink, lane: Lane, row: notifications.Claimed) -> bool:
    """Send one claimed row and mark it; True when delivered. Database errors propagate."""
    policy = run.policy
    bound = log.bind(
        notification_id=row.id,
        incident_id=row.incident_id,
        sink=row.sink,
        notification_event=row.event,
        attempt=row.attempts,
        schedule_id=row.message.get("schedule_id"),
    )
    try:
        size = await send(
            run.http,
            sink,
            row.message,
            delivery_id=delivery_id(incident_id=row.incident_id, event=row.event, sink=row.sink),
            timeout=min(policy.send_timeout, run.deadline - time.monotonic()),
            limit=lane.limit,
        )
    except Exception as exc:
        # Any failure of one sink, a bug in rendering too, fails this row only: it is
        # retried later (or given up on), and the lane goes on.
        _judge(lane, exc, log=bound)
        await _failed(
            run.pool,
            row,
            exc,
            claimer=run.claimer,
            policy=policy,
            metrics=run.metrics,
            log=bound,
        )
        return False
    lane.hangs = False
    if lane.breaker.succeeded():
        bound.info("sink.breaker-closed")
    async with asyncio.timeout(policy.database_timeout), run.pool.acquire() as conn:
        await notifications.mark_delivered(conn, notification_id=row.id, claimer=run.claimer)
    run.metrics.notification_sent(row.sink)
    bound.info("notification.delivered", bytes=size)
    return True


def _judge(lane: Lane, exc: BaseException, *, log: FilteringBoundLogger) -> None:
    """What a failed send tells the sink's breaker: the sink failing counts; the sink refusing
    this page (it answered) counts as an answer; a bug of ours counts as neither."""
    if not isinstance(exc, SinkError):
        return
    lane.hangs = exc.timed_out
    if not exc.sink_failed:
        lane.breaker.succeeded()
        return
    if lane.breaker.failed(time.monotonic()):
        log.error(
            "sink.breaker-opened",
            failures=lane.breaker.failures,
            cooldown_seconds=lane.breaker.cooldown,
            note="this sink's pages wait (none is dropped); one probe per cool-down",
        )


async def _failed(
    pool: asyncpg.Pool,
    row: notifications.Claimed,
    exc: BaseException,
    *,
    claimer: str,
    policy: DeliveryPolicy,
    metrics: Metrics,
    log: FilteringBoundLogger,
) -> None:
    error = failure(exc)
    permanent = isinstance(exc, SinkError) and exc.permanent
    if permanent:
        reason = "refused by the sink"
        async with asyncio.timeout(policy.database_timeout), pool.acquire() as conn:
            dead = await notifications.mark_dead(
                conn, notification_id=row.id, claimer=claimer, error=f"{error} ({reason})"
            )
        metrics.notification_failed(row.sink)
        if dead:
            metrics.notification_dead(row.sink)
        log.error("notification.dead-lettered", error=error, reason=reason)
        return
    retry_in = policy.retry_in(row.attempts)
    metrics.notification_failed(row.sink)
    if isinstance(exc, SinkError) and exc.misconfigured:
        # Retried (fixing the settings lets this very page through), but nobody is paged
        # through this sink until someone does: an error, not a warning.
        log.error("notification.sink-misconfigured", error=error, retry_in_seconds=retry_in)
    else:
        log.warning("notification.failed", error=error, retry_in_seconds=retry_in)
    async with asyncio.timeout(policy.database_timeout), pool.acquire() as conn:
        await notifications.mark_failed(
            conn, notification_id=row.id, claimer=claimer, error=error, retry_in_seconds=retry_in
        )
