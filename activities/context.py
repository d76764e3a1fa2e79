"""The `JobContext` the guard hands to a job, and the one transaction it may open."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import asyncpg
import structlog
from temporalio import activity

from cronwarden.store.runs import CURRENT_MARKER, ROLLBACK_TO_RUN_START, begin_run_script

_CONNECTION_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)
# The look at the transaction's marker on a failure path: a connection that does not answer
# this fast is not asked again (the job's error is reported as it was).
MARKER_CHECK_TIMEOUT = 2.0


class RunContext:
    """Implements `activities.jobs.JobContext` for one run of one logical key."""

    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        schedule_id: str,
        fire_time: datetime,
        logical_key: str,
        attempt: int,
        args: Any,
        log: structlog.typing.FilteringBoundLogger,
        idle_timeout_seconds: float | None,
        commit_idle_timeout_seconds: float,
        before_transaction: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`idle_timeout_seconds`: how long the job's transaction may sit idle before the
        server ends it while the job runs (None: no bound). `commit_idle_timeout_seconds`:
        the same between the commit statement and COMMIT, when the transaction holds the lease
        row's lock (the lease's TTL: a stopped holder keeps the row locked no longer than its
        lease would have lasted)."""
        self.schedule_id = schedule_id
        self.fire_time = fire_time
        self.logical_key = logical_key
        self.idempotency_key = logical_key
        self.attempt = attempt
        self.args = args
        self.log = log
        self._pool = pool
        self._entered = False
        self.conn: Any = None
        self._tx: Any = None
        self.block_exited_at: float | None = None
        self.abandoned = False
        """The block raised and rolled back (the job may have caught the error)."""
        self._before_transaction = before_transaction
        self._idle_timeout = _milliseconds(idle_timeout_seconds)
        self.commit_idle_timeout = _milliseconds(commit_idle_timeout_seconds)
        self.marker: str | None = None
        """Set local to the job's transaction: the commit statement checks it is still there,
        so a job that committed it and began another cannot commit the outbox record."""
        self.ended_by_job = False
        """The job ended the transaction `transaction()` opened (a COMMIT, a ROLLBACK, a script
        holding one): writes it made may have landed without the outbox record, so however the
        run ends now, it must not be retried. Noted when the transaction is rolled back, which
        every way out of a run but the commit does."""

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        if self._entered:
            raise RuntimeError(
                "ctx.transaction() may be entered at most once per run: all of a job's writes "
                "commit together with its outbox record"
            )
        self._entered = True
        if self._before_transaction is not None:
            # Network waits (the next fires' look-up) happen here, never once BEGIN has run.
            await self._before_transaction()
        conn = await self._pool.acquire()
        tx = conn.transaction()
        marker = uuid.uuid4().hex
        try:
            await tx.start()
            await conn.execute(begin_run_script(marker, self._idle_timeout))
        except BaseException:
            with contextlib.suppress(*_CONNECTION_ERRORS):
                if conn.is_in_transaction():
                    await tx.rollback()
            await self._release(conn)
            raise
        self.conn, self._tx, self.marker = conn, tx, marker
        try:
            yield conn
        except BaseException:
            self.abandoned = True
            await self.rollback()
            raise
        # The transaction stays open: the guard appends the fencing check, the outbox record and
        # the heartbeat to it once the job returns, and commits all of it at once. The job should
        # return right after the block; `block_exited_at` lets the guard warn if it does not.
        self.block_exited_at = time.monotonic()

    @property
    def in_transaction(self) -> bool:
        return self._tx is not None

    async def commit(self) -> None:
        tx, conn = self._tx, self.conn
        self._tx = self.conn = None
        try:
            await tx.commit()
        finally:
            await self._release(conn)

    async def rollback(self) -> None:
        tx, conn = self._tx, self.conn
        if tx is None:
            return
        await self._note_if_ended(conn)
        self._tx = self.conn = None
        try:
            await tx.rollback()
        except _CONNECTION_ERRORS:
            # The connection may be gone already (that is often why we roll back): the server
            # aborts the transaction by itself then.
            pass
        finally:
            await self._release(conn)

    async def _note_if_ended(self, conn: Any) -> None:
        """Only on the way to a rollback: the answer may roll the transaction back to its
        start."""
        if self.ended_by_job:
            return
        # A connection that cannot answer (cut, released by the pool after the server closed
        # it) keeps the benefit of the doubt: nothing shows the job ended anything.
        with contextlib.suppress(*_CONNECTION_ERRORS):
            # The server's transaction status, as its last message said: idle means the job's
            # COMMIT or ROLLBACK ended ours. A COMMIT cannot be told from a ROLLBACK here.
            if not conn.is_in_transaction():
                self.ended_by_job = True
                return
            # In a transaction, but maybe one the job began after ending ours: the marker is
            # local to ours.
            try:
                current = await conn.fetchval(CURRENT_MARKER, timeout=MARKER_CHECK_TIMEOUT)
            except (asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
                # Aborted (a failed statement), or still busy (a statement being cancelled): ask
                # by the savepoint only our transaction has.
                self.ended_by_job = await self._savepoint_gone(conn)
                return
            self.ended_by_job = current != self.marker

    async def _savepoint_gone(self, conn: Any) -> bool:
        deadline = time.monotonic() + MARKER_CHECK_TIMEOUT
        while True:
            try:
                await conn.execute(ROLLBACK_TO_RUN_START, timeout=MARKER_CHECK_TIMEOUT)
            except asyncpg.InvalidSavepointSpecificationError:
                return True
            except asyncpg.InterfaceError:
                # A statement still being cancelled keeps the connection busy for a moment.
                if conn.is_closed() or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
                continue
            return False

    async def _release(self, conn: Any) -> None:
        # The pool closes a broken connection instead of reusing it; that it was broken is
        # reported by whoever used it, not again here.
        with contextlib.suppress(*_CONNECTION_ERRORS):
            await self._pool.release(conn)

    async def heartbeat(self, details: Any = None) -> None:
        if details is None:
            activity.heartbeat()
        else:
            activity.heartbeat(details)


def _milliseconds(seconds: float | None) -> str:
    """A timeout setting's value; '0' (no timeout) for None."""
    return "0" if seconds is None else f"{max(int(seconds * 1000), 1)}ms"
