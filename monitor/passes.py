"""The monitor's pass: one look at the heartbeats, its incident writes and its sends.

One pass: lift the recorded pauses Temporal no longer holds (`monitor.pauses`; skipped when
Temporal does not answer), end the timed pauses whose end has passed (`monitor.timed_pauses`;
one that cannot be ended pages `unpause-failed`), read a snapshot (database time), decide (pure,
`monitor.scan`), write each decision with a conditional statement together with its
notifications, and record this monitor's liveness. Then, side by side and each within the pass's
send budget: resolve the "cannot reach the database" alert if one is open, ping the external
dead-man's switch, and deliver what is due, every sink in its own lane (`monitor.notify`), so a
sink that hangs holds back neither the others nor the ping. Paging needs Postgres only: the
monitor keeps paging while Temporal and every worker are down.

Only database work counts as "cannot reach the database": each database step has its own bound,
and a send never raises (a slow or failing sink fails its own notification, nothing more).

The process around the passes (signals, the metrics server, the sinks configured, the loop that
survives a failed pass) is `monitor.process`.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from cronwarden.config import Settings
from cronwarden.errors import Unreachable
from cronwarden.logs import get_logger
from cronwarden.monitor import db_alert, scan
from cronwarden.monitor.gap_causes import CausePolicy, with_causes
from cronwarden.monitor.messages import (
    LISTED,
    RESOLVE,
    TRIGGER,
    database_unreachable_message,
    incident_message,
    page_link,
    system_details,
    system_summary,
)
from cronwarden.monitor.metrics import Metrics
from cronwarden.monitor.notify import DeliveryPolicy, Lane, deliver_due, lane_of
from cronwarden.monitor.pauses import PauseCheck
from cronwarden.monitor.sinks import Http, Sink, failure, ping, send
from cronwarden.monitor.timed_pauses import end_due
from cronwarden.redact import redact
from cronwarden.store import (
    heartbeats,
    incidents,
    monitor_state,
    notifications,
    pause_history,
    watch,
)
from cronwarden.store.pool import create_pool
from cronwarden.times import utc_text_or_none

log = get_logger("cronwarden.monitor")

DEFAULT_INTERVAL = 15.0
# What a pass (and the status page) takes for "cannot use the database", never for a bug.
DATABASE_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    # A connection the server closed under us can surface as a protocol-state error.
    asyncpg.InternalClientError,
    OSError,
    TimeoutError,
    Unreachable,
)


@dataclass(frozen=True)
class MonitorOptions:
    interval: float = DEFAULT_INTERVAL
    rule: scan.SystemRule = field(default_factory=scan.SystemRule)
    delivery: DeliveryPolicy = field(default_factory=DeliveryPolicy)
    ping_url: str | None = None
    db_alert_every: float = 900.0
    database_timeout: float = 30.0
    """No pass may hang on a stuck database (a lock held by someone else, a server that stopped
    answering): past this a database step fails as "cannot reach the database" and alerts,
    instead of the monitor silently waiting for ever."""
    state_file: Path | None = None
    """Where the "cannot reach the database" alert's state survives a restart (`db_alert`)."""
    unserved_after: float = 3600.0
    """A notification of a sink that no running monitor has is given up on after this long."""
    status_page_url: str | None = None
    """Where pages link to (the status page); None: no link."""
    causes: CausePolicy = field(default_factory=CausePolicy)
    """How long and for how many new pages a pass asks Temporal for their likely cause."""
    horizon_lead: timedelta = incidents.HORIZON_LEAD
    """How long before a local-time schedule's compiled entries end its `horizon` page goes
    out: the time left to re-apply before Temporal has no fire of it."""

    @property
    def send_budget(self) -> float:
        """The time budget of a pass's sends: the database alert, the ping and each sink's
        lane get it side by side, each request also bounded by the send timeout."""
        return max(self.interval, self.delivery.send_timeout)

    @property
    def peer_window(self) -> float:
        """A monitor that passed this recently counts as running (its sinks are paged)."""
        return max(60.0, 4 * self.interval)


def options_from_settings(settings: Settings, *, interval: float) -> MonitorOptions:
    ping_url = settings.monitor_ping_url
    return MonitorOptions(
        interval=interval,
        rule=scan.SystemRule(
            min_schedules=settings.monitor_system_min_schedules,
            ratio=settings.monitor_system_ratio,
        ),
        delivery=DeliveryPolicy(
            send_timeout=settings.monitor_send_timeout_seconds,
            retry_base=settings.monitor_retry_base_seconds,
            retry_max=settings.monitor_retry_max_seconds,
            database_timeout=settings.monitor_database_timeout_seconds,
            concurrency=settings.monitor_sink_concurrency,
            breaker_failures=settings.monitor_breaker_failures,
            breaker_cooldown=settings.monitor_breaker_cooldown_seconds,
            max_body={"webhook": settings.alert_webhook_max_bytes},
        ),
        status_page_url=settings.status_page_url,
        ping_url=ping_url.get_secret_value() if ping_url is not None else None,
        db_alert_every=settings.monitor_db_alert_every_seconds,
        database_timeout=settings.monitor_database_timeout_seconds,
        state_file=db_alert.default_state_file(settings.dsn),
        horizon_lead=settings.monitor_horizon_lead,
    )


def monitor_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class PassReport:
    watched: int = 0
    """Heartbeat rows the pass looked at."""
    overdue: int = 0
    opened: int = 0
    resolved: int = 0
    delivered: int = 0
    open_incidents: int = 0

    def summary(self) -> str:
        """One line of what the pass checked and did (`monitor --once` prints it)."""
        return (
            f"checked {self.watched} schedule(s): {self.overdue} overdue, "
            f"{self.opened} incident(s) opened, {self.resolved} resolved, "
            f"{self.delivered} page(s) delivered; {self.open_incidents} incident(s) open"
        )


class Monitor:
    def __init__(
        self,
        *,
        dsn: str,
        sinks: Mapping[str, Sink],
        options: MonitorOptions,
        metrics: Metrics | None = None,
        pauses: PauseCheck | None = None,
    ) -> None:
        self.dsn = dsn
        self.sinks = dict(sinks)
        self.options = options
        self.metrics = metrics or Metrics()
        self.pauses = pauses
        """None: recorded pauses are trusted as they are (no Temporal to check them with)."""
        self.identity = monitor_identity()
        self.http = Http()
        self.alert = db_alert.AlertStore(options.state_file)
        self._pool: asyncpg.Pool | None = None
        self._targets: list[str] = self.sink_names
        self.lanes: dict[str, Lane] = {}
        """Each sink's breaker and body limit, kept from pass to pass."""

    def _drop_pool(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool = None

    async def close(self) -> None:
        for lane in self.lanes.values():
            await lane.aclose()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        await self.http.aclose()

    last_report: PassReport | None = None
    """What the last pass that reached the database did."""

    async def step(self) -> BaseException | None:
        """One pass that never raises an expected failure: returns the database error, if any."""
        try:
            await self.run_pass()
        except DATABASE_ERRORS:
            # Pooled connections broken by a database restart fail once: drop them all and
            # retry at once on fresh ones (a pass is safe to repeat), so that blip never pages.
            self._drop_pool()
            try:
                await self.run_pass()
            except DATABASE_ERRORS as exc:
                await self._database_unreachable(exc)
                return exc
        return None

    def _db(self) -> asyncio.Timeout:
        return asyncio.timeout(self.options.database_timeout)

    async def run_pass(self) -> PassReport:
        if self._pool is None:
            # Small and separate from any worker's pool: a starved worker must not starve the
            # monitor that pages about it. The command timeout bounds the reset asyncpg runs on
            # release, which goes on shielded in the background after a pass's own timeout
            # fired: without it, a blackholed database would keep that connection out of the
            # pool until TCP gives up.
            async with self._db():
                self._pool = await create_pool(
                    self.dsn,
                    min_size=1,
                    # The pass's own steps, and the claims and marks of the sinks' lanes
                    # (each a short statement) side by side.
                    max_size=4,
                    command_timeout=self.options.database_timeout,
                )
        pool = self._pool
        report = PassReport()
        await self._check_pauses(pool)
        await self._end_timed_pauses(pool)
        async with self._db():
            async with pool.acquire() as conn:
                snap = await watch.snapshot(conn, horizon_lead=self.options.horizon_lead)
            decided = scan.plan(
                now=snap.now,
                overdue=snap.overdue,
                incident_heartbeats=snap.incident_heartbeats,
                overlong=snap.overlong,
                open_incidents=snap.open_incidents,
                watched=len(snap.watched),
                rule=self.options.rule,
                join_window=timedelta(seconds=2 * self.options.interval),
                system_members=snap.system_members,
                horizons=snap.horizons,
                horizon_lead=self.options.horizon_lead,
                breaches=snap.breaches,
                unpause_failures=snap.unpause_failures,
            )
            report.watched = len(snap.watched)
            report.overdue = sum(
                scan.heartbeat_problem(b, snap.now) is not None for b in snap.overdue
            )
        # Between the snapshot and the writes, outside the database's bound: Temporal's
        # causes of the pages about to open, within their own bound (`monitor.gap_causes`).
        decided = await self._with_causes(pool, decided, now=snap.now)
        async with self._db(), pool.acquire() as conn:
            await monitor_state.record_pass(
                conn,
                monitor_id=self.identity,
                host=socket.gethostname(),
                pid=os.getpid(),
                sinks=self.sink_names,
            )
            peers = await monitor_state.peer_sinks(conn, within_seconds=self.options.peer_window)
            self._targets = sorted(set(self.sink_names) | set(peers))
            report.opened = await self._open(conn, decided)
            report.resolved = await self._resolve(conn, decided)
            open_now = len(await incidents.open_incidents(conn))
            report.open_incidents = open_now
            await self._bury_unserved(conn)
        self.metrics.seconds_since_success = {
            r["schedule_id"]: r["seconds_since_success"] for r in snap.watched
        }
        self.metrics.overdue = report.overdue
        self.metrics.open_incidents = open_now
        self.metrics.last_pass_at = time.time()
        self.metrics.database_up = True
        # One budget, spent side by side by the database alert, the ping and each sink's lane:
        # a slow sink delays the next pass by at most this much, costs no other sink anything,
        # and never makes the database look unreachable.
        deadline = time.monotonic() + self.options.send_budget
        # Each ends by itself (bounded by the deadline); an error is raised once all have.
        results = await asyncio.gather(
            deliver_due(
                pool,
                self.sinks,
                http=self.http,
                claimer=self.identity,
                policy=self.options.delivery,
                metrics=self.metrics,
                deadline=deadline,
                lanes=self.lanes,
            ),
            self._database_reachable(deadline),
            self._ping(deadline),
            return_exceptions=True,
        )
        delivered = results[0]
        for result in results:
            if isinstance(result, BaseException):
                raise result
        assert isinstance(delivered, int)
        report.delivered = delivered
        log.debug("monitor.pass", **vars(report))
        self.last_report = report
        return report

    async def _with_causes(
        self, pool: asyncpg.Pool, decided: scan.Plan, *, now: datetime
    ) -> scan.Plan:
        """`decided` with the likely cause of each overdue page it opens on its own (a fleet
        incident's members are not asked about one by one)."""
        found = await with_causes(
            [*decided.open, *(p for _, p in decided.replace)],
            client=self.pauses.client_or_none if self.pauses is not None else None,
            pool=pool,
            now=now,
            policy=self.options.causes,
        )
        if not found:
            return decided
        return replace(
            decided,
            open=[found.get(p.schedule_id, p) for p in decided.open],
            replace=[(old, found.get(p.schedule_id, p)) for old, p in decided.replace],
        )

    async def _check_pauses(self, pool: asyncpg.Pool) -> None:
        """Lift the recorded pauses Temporal no longer holds (see `monitor.pauses`)."""
        if self.pauses is None:
            return
        async with self._db(), pool.acquire() as conn:
            rows = await heartbeats.paused_rows(conn)
        found = await self.pauses.lifts(rows)
        self.metrics.temporal_reachable = self.pauses.reachable
        self.metrics.pauses_unverified = len(self.pauses.unverified)
        for lift in found:
            async with self._db(), pool.acquire() as conn:
                changed = await heartbeats.lift_stale_pause(
                    conn,
                    schedule_id=lift.schedule_id,
                    seen_updated_at=lift.seen_updated_at,
                    next_expected_at=lift.next_expected_at,
                )
                if changed and lift.ran_again_at is not None:
                    await pause_history.ended_by(conn, lift.schedule_id, at=lift.ran_again_at)
            if changed:
                log.warning(
                    "monitor.pause-lifted-outside",
                    schedule_id=lift.schedule_id,
                    next_expected_at=utc_text_or_none(lift.next_expected_at),
                    note="recorded as paused, but Temporal runs it: watched again",
                )

    async def _end_timed_pauses(self, pool: asyncpg.Pool) -> None:
        """Unpause the schedules whose timed pause has ended (see `monitor.timed_pauses`); with
        no Temporal to ask, each stays paused and pages `unpause-failed`."""
        await end_due(
            pool,
            self.pauses.client_or_none if self.pauses is not None else None,
            # The unpause's few calls to Temporal, each normally milliseconds.
            timeout=2 * (self.pauses.policy.timeout if self.pauses is not None else 5.0),
            database=self._db,
        )

    async def _bury_unserved(self, conn: Any) -> None:
        for row in await notifications.bury_unserved(
            conn,
            own_sinks=self.sink_names,
            older_than=self.options.unserved_after,
            peer_window=self.options.peer_window,
        ):
            self.metrics.notification_dead(row["sink"])
            log.error(
                "notification.dead-lettered",
                notification_id=row["id"],
                sink=row["sink"],
                reason="no running monitor delivers to this sink",
            )

    @property
    def sink_names(self) -> list[str]:
        return sorted(self.sinks)

    async def _page(
        self,
        conn: Any,
        event: str,
        incident: Mapping[str, Any],
        schedules: list[dict[str, Any]] | None = None,
    ) -> None:
        """Persist the page for every sink, in the caller's transaction. A resolve also goes to
        every sink its trigger went to: the monitor delivering to one of them may be away for
        now, and its alert must still close once that monitor is back."""
        sinks = self._targets
        if event == RESOLVE:
            paged = await notifications.trigger_sinks(conn, incident_id=incident["id"])
            sinks = sorted(set(sinks) | set(paged))
        await notifications.enqueue(
            conn,
            incident_id=incident["id"],
            event=event,
            sinks=sinks,
            message=incident_message(
                event,
                incident,
                schedules=schedules or [],
                link=page_link(self.options.status_page_url, incident["schedule_id"]),
            ),
        )

    async def _open_one(
        self, conn: Any, problem: scan.Problem, parent_id: int | None = None
    ) -> dict[str, Any] | None:
        return await incidents.open_incident(
            conn,
            schedule_id=problem.schedule_id,
            kind=problem.kind,
            summary=problem.summary,
            details=problem.details,
            parent_id=parent_id,
            horizon_lead=self.options.horizon_lead,
        )

    async def _open_under(
        self, conn: Any, row: Mapping[str, Any], problems: list[scan.Problem] | None
    ) -> list[dict[str, Any]] | None:
        """Open `problems` under the incident `row`, in its transaction, so its one page lists
        them after its own schedule (`scan.Plan.under`); None when it pages for itself alone.
        Members resolve quietly, and it resolves once none is left (`scan.plan`)."""
        if not problems:
            return None
        listed = [{"schedule_id": row["schedule_id"], "kind": row["kind"]}]
        for problem in problems:
            member = await self._open_one(conn, problem, parent_id=row["id"])
            if member is not None:
                listed.append({"schedule_id": member["schedule_id"], "kind": member["kind"]})
        return listed

    async def _open(self, conn: Any, decided: scan.Plan) -> int:
        opened = 0
        for problem in decided.open:
            async with conn.transaction():
                row = await self._open_one(conn, problem)
                if row is None:
                    continue  # open already, or another replica opened it first (with any
                    # schedules it pages for)
                members = await self._open_under(conn, row, decided.under.get(problem.schedule_id))
                await self._page(conn, TRIGGER, row, members)
            # The listed schedules: the incident's own first, then those opened under it.
            opened += len(members) if members else 1
            log.warning(
                "incident.opened",
                incident_id=row["id"],
                schedule_id=problem.schedule_id,
                kind=problem.kind,
                summary=problem.summary,
                **({} if members is None else {"schedules_total": len(members)}),
            )
        if decided.system:
            opened += await self._open_system(conn, decided.system)
        for old, problem in decided.replace:
            opened += await self._replace(conn, old, problem)
        await self._page_unpaged(conn)
        await self._page_new_sinks(conn)
        return opened

    async def _page_new_sinks(self, conn: Any) -> None:
        """A sink that came back (its monitor was away when incidents opened) gets the triggers
        of the incidents still open: otherwise they never reach it."""
        for incident_id, sink in await notifications.queue_missing_triggers(
            conn, sinks=self._targets
        ):
            log.warning("incident.paged-late", incident_id=incident_id, sink=sink)

    async def _replace(self, conn: Any, old: Mapping[str, Any], problem: scan.Problem) -> int:
        """The problem changed kind: resolve the old incident and open the new one together, so
        no pass ever sees the schedule with neither (or pages the old kind's resolve alone)."""
        async with conn.transaction():
            row = await incidents.resolve(conn, incident_id=old["id"], resolution=scan.KIND_CHANGED)
            if row is None:
                return 0  # another replica resolved it first (and replaces it)
            if row["parent_id"] is None:
                await self._page(conn, RESOLVE, row)
            new = await self._open_one(conn, problem)
            if new is not None:
                await self._page(conn, TRIGGER, new)
        log.warning(
            "incident.kind-changed",
            incident_id=old["id"],
            new_incident_id=new["id"] if new is not None else None,
            schedule_id=problem.schedule_id,
            kind=problem.kind,
            former_kind=old["kind"],
        )
        return 1 if new is not None else 0

    async def _page_unpaged(self, conn: Any) -> None:
        """The safety net of the system-incident locks (`incidents.open_system`): any open
        incident whose parent is resolved or gone, or that never queued a trigger, pages on its
        own. Nothing to do without sinks: there is nobody to page."""
        if not self._targets:
            return
        for found in await incidents.unpaged(conn):
            async with conn.transaction():
                row = await incidents.detach(
                    conn, incident_id=found["id"], parent_id=found["parent_id"]
                )
                if row is None:
                    continue
                await self._page(conn, TRIGGER, row)
            log.warning(
                "incident.paged-alone",
                incident_id=row["id"],
                schedule_id=row["schedule_id"],
                kind=row["kind"],
                former_parent_id=found["parent_id"],
            )

    async def _open_system(self, conn: Any, problems: list[scan.Problem]) -> int:
        ids = [p.schedule_id for p in problems]
        tx = conn.transaction()
        await tx.start()
        try:
            # Bounded whatever the outage's size: the first ids and the count. The page lists
            # the first members and links to the rest (`messages.incident_message`).
            system_id, created = await incidents.open_system(
                conn, summary=system_summary(ids), details=system_details(ids)
            )
            members = []
            for problem in problems:
                row = await self._open_one(conn, problem, parent_id=system_id)
                if row is not None:
                    members.append(row)
            if created is not None and not members:
                # Every schedule of the plan was opened meanwhile by another replica (each
                # paged alone) or is fine again: a system page would list nobody.
                await tx.rollback()
                log.info(
                    "incident.system-not-opened",
                    schedule_ids=ids[:LISTED],
                    schedules_total=len(ids),
                    reason="no member left",
                )
                return 0
            if created is not None:
                listed = [
                    {"schedule_id": m["schedule_id"], "kind": m["kind"], "summary": m["summary"]}
                    for m in members
                ]
                await self._page(conn, TRIGGER, created, listed)
        except BaseException:
            await tx.rollback()
            raise
        await tx.commit()
        log.warning(
            "incident.system-opened" if created is not None else "incident.joined-system",
            incident_id=system_id,
            schedule_ids=[m["schedule_id"] for m in members[:LISTED]],
            schedules_total=len(members),
        )
        return len(members) + (1 if created is not None else 0)

    async def _resolve(self, conn: Any, decided: scan.Plan) -> int:
        resolved = 0
        for item in decided.resolve:
            async with conn.transaction():
                row = await incidents.resolve(
                    conn, incident_id=item.incident["id"], resolution=item.resolution
                )
                if row is None:
                    continue  # another replica resolved it first
                # A schedule paged through a system incident resolves quietly; the system
                # incident sends the one resolve once all of its schedules are fine.
                if row["parent_id"] is None:
                    await self._page(conn, RESOLVE, row)
            resolved += 1
            log.info(
                "incident.resolved",
                incident_id=row["id"],
                schedule_id=row["schedule_id"],
                kind=row["kind"],
                resolution=item.resolution,
            )
        async with conn.transaction():
            for row in await incidents.resolve_finished_systems(conn):
                await self._page(conn, RESOLVE, row)
                resolved += 1
                log.info("incident.resolved", incident_id=row["id"], kind=row["kind"])
        return resolved

    async def _ping(self, deadline: float) -> None:
        if self.options.ping_url is None:
            return
        try:
            await ping(self.http, self.options.ping_url, timeout=self._send_timeout(deadline))
        except Exception as exc:
            log.warning("monitor.ping-failed", error=failure(exc))

    def _send_timeout(self, deadline: float) -> float:
        return min(self.options.delivery.send_timeout, deadline - time.monotonic())

    async def _database_unreachable(self, exc: BaseException) -> None:
        # Sent straight to the sinks: scrubbed here (a DSN in a driver's error carries its
        # password), where a stored text is scrubbed at its write.
        error = redact(f"{type(exc).__name__}: {exc}".strip())
        self.metrics.database_up = False
        log.error("monitor.database-unreachable", error=error)
        self._drop_pool()
        before = self.alert.state
        after, page = db_alert.on_failure(
            before, now=db_alert.clock(), every=self.options.db_alert_every
        )
        if page:
            # No database to persist a notification in: send straight to the sinks.
            message = database_unreachable_message(
                TRIGGER, monitor_id=self.identity, host=socket.gethostname(), error=error
            )
            if not await self._send_direct(message, after):
                # Nobody got it: try again on the next failed pass.
                after = replace(after, open=before.open, last_trigger_at=before.last_trigger_at)
        self.alert.save(after)

    async def _database_reachable(self, deadline: float) -> None:
        """Resolve the open "cannot reach the database" alert, whoever opened it on this host:
        this process, or one before it (restarted, or a `--once`)."""
        before = self.alert.state
        after, resolve = db_alert.on_healthy(before)
        if resolve:
            log.info("monitor.database-reachable")
            message = database_unreachable_message(
                RESOLVE, monitor_id=self.identity, host=socket.gethostname(), error=""
            )
            if not await self._send_direct(message, before, deadline=deadline):
                after = replace(after, open=True)  # resolve on the next pass
        self.alert.save(after)

    async def _send_direct(
        self, message: dict[str, Any], state: db_alert.AlertState, *, deadline: float | None = None
    ) -> bool:
        """Send to every sink, side by side; True when at least one took it (or there is none)."""
        if deadline is None:
            deadline = time.monotonic() + self.options.send_budget
        opened = int(state.last_trigger_at or 0)
        took = await asyncio.gather(
            *(
                self._send_one_direct(sink, message, opened, deadline)
                for sink in self.sinks.values()
            )
        )
        return not self.sinks or any(took)

    async def _send_one_direct(
        self, sink: Sink, message: dict[str, Any], opened: int, deadline: float
    ) -> bool:
        try:
            await send(
                self.http,
                sink,
                message,
                # The same for every resend of this alert's trigger or resolve.
                delivery_id=(f"{message['dedup_key']}:{opened}:{message['event']}:{sink.name}"),
                timeout=self._send_timeout(deadline),
                limit=lane_of(self.lanes, sink, self.options.delivery).limit,
            )
        except Exception as exc:
            self.metrics.notification_failed(sink.name)
            log.warning(
                "notification.direct-failed",
                sink=sink.name,
                kind=message["kind"],
                error=failure(exc),
            )
            return False
        self.metrics.notification_sent(sink.name)
        log.info("notification.direct-delivered", sink=sink.name, kind=message["kind"])
        return True
