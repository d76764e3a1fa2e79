"""Jobs the tests run. Their effects go to `test_effects`, which has NO unique constraint: a
duplicate application shows up as a second row instead of being swallowed."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import asyncpg
from pydantic import BaseModel, Field

from cronwarden import JobContext, job

EFFECTS_DDL = """
CREATE TABLE IF NOT EXISTS public.test_effects (
    logical_key text        NOT NULL,
    attempt     integer     NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""


async def record_effect(conn: Any, ctx: JobContext, started: datetime | None = None) -> None:
    await conn.execute(
        "INSERT INTO public.test_effects (logical_key, attempt, started_at) VALUES ($1, $2, $3)",
        ctx.logical_key,
        ctx.attempt,
        started or datetime.now(UTC),
    )


class ProbeArgs(BaseModel):
    sleep: float = Field(default=0.0, ge=0)
    fail_attempts: int = Field(default=0, ge=0)
    """Raise on attempts 1..fail_attempts, succeed after."""
    write: bool = True


@job("probe", args_model=ProbeArgs)
async def probe(ctx: JobContext) -> dict[str, Any]:
    args: ProbeArgs = ctx.args
    started = datetime.now(UTC)
    if ctx.attempt <= args.fail_attempts:
        raise RuntimeError(f"probe failing on purpose (attempt {ctx.attempt})")
    await asyncio.sleep(args.sleep)
    if args.write:
        async with ctx.transaction() as conn:
            await record_effect(conn, ctx, started)
    return {"attempt": ctx.attempt, "key": ctx.idempotency_key}


@job("noop-digest", read_only=True)
async def noop_digest(ctx: JobContext) -> None:
    return None


@job("swallow-tx-error")
async def swallow_tx_error(ctx: JobContext) -> None:
    # A job that catches the error of its own transaction block: its writes are gone, so the
    # key must not be marked done.
    try:
        async with ctx.transaction() as conn:
            await record_effect(conn, ctx)
            await conn.execute("SELECT 1/0")
    except Exception:
        ctx.log.warning("test.swallowed")


@job("nan-result")
async def nan_result(ctx: JobContext) -> dict[str, Any]:
    return {"ratio": float("nan")}


class EndsTransactionArgs(BaseModel):
    statement: str
    """Run inside ctx.transaction() after the effect: "COMMIT", a script ending in COMMIT,
    "COMMIT; BEGIN"... A job must never do this: the guard must catch it."""
    then: Literal["return", "raise", "raise-after-block", "hang", "swallow"] = "return"
    """What the job does next: returns; raises inside the block; leaves the block and raises;
    waits inside the block until its timeout (or its lease's loss) cancels it; or catches the
    statement's own error and returns."""


@job("ends-transaction", args_model=EndsTransactionArgs)
async def ends_transaction(ctx: JobContext) -> None:
    args: EndsTransactionArgs = ctx.args
    async with ctx.transaction() as conn:
        await record_effect(conn, ctx)
        try:
            await conn.execute(args.statement)
        except asyncpg.PostgresError:
            if args.then != "swallow":
                raise
        if args.then == "raise":
            raise RuntimeError("failing inside the block after ending the transaction")
        if args.then == "hang":
            await asyncio.Event().wait()
    if args.then == "raise-after-block":
        raise RuntimeError("failing after the block, whose transaction the job ended")


class FailsAtArgs(BaseModel):
    at: Literal["before", "inside", "after-block", "stalls-inside"]
    """Where the first attempt raises: before its transaction, inside the block after its
    write, or after the block (its transaction still open, waiting for the guard's commit);
    or, `stalls-inside`, where it stalls in a statement after its write until its timeout."""


@job("fails-at", args_model=FailsAtArgs)
async def fails_at(ctx: JobContext) -> dict[str, Any]:
    args: FailsAtArgs = ctx.args
    failing = ctx.attempt == 1
    if failing and args.at == "before":
        raise RuntimeError("failing before the transaction")
    async with ctx.transaction() as conn:
        await record_effect(conn, ctx)
        if failing and args.at == "inside":
            raise RuntimeError("failing inside the block, after the write")
        if failing and args.at == "stalls-inside":
            await conn.execute("SELECT pg_sleep(600)")
    if failing and args.at == "after-block":
        raise RuntimeError("failing after the block, before returning")
    return {"attempt": ctx.attempt}


class IdlesArgs(BaseModel):
    seconds: float
    """How long the job does work outside the database (no statement) while its transaction
    is open."""
    where: Literal["inside", "after-block"]
    """Inside the block, between two statements, or after it, before returning."""


@job("idles-in-transaction", args_model=IdlesArgs)
async def idles_in_transaction(ctx: JobContext) -> dict[str, Any]:
    args: IdlesArgs = ctx.args
    async with ctx.transaction() as conn:
        await record_effect(conn, ctx)
        if args.where == "inside":
            await asyncio.sleep(args.seconds)
            await conn.execute("SELECT 1")
    if args.where == "after-block":
        await asyncio.sleep(args.seconds)
    return {"attempt": ctx.attempt}


class MarksStartArgs(BaseModel):
    marker: str
    """A file the job creates the moment it starts: the test sees whether the job ran at all."""


@job("marks-start", args_model=MarksStartArgs)
async def marks_start(ctx: JobContext) -> None:
    args: MarksStartArgs = ctx.args
    Path(args.marker).touch()
    async with ctx.transaction() as conn:
        await record_effect(conn, ctx)


class DropConnectionArgs(BaseModel):
    dsn: str
    on_attempts: int = 1


@job("drop-connection-before-commit", args_model=DropConnectionArgs)
async def drop_connection_before_commit(ctx: JobContext) -> None:
    """Writes its effect, then has a side connection kill the backend of its own transaction,
    so the guard's commit fails on a dead connection (the database restarting, a proxy dropping
    the connection) on the first attempts."""
    args: DropConnectionArgs = ctx.args
    async with ctx.transaction() as conn:
        await record_effect(conn, ctx)
        pid = conn.get_server_pid()
    if ctx.attempt <= args.on_attempts:
        side = await asyncpg.connect(args.dsn)
        try:
            await side.execute("SELECT pg_terminate_backend($1)", pid)
        finally:
            await side.close()


class GatedArgs(BaseModel):
    gate: str
    """Path of a file the job waits for before it writes: the test decides when it finishes."""
    wait_seconds: float = 60.0
    hold_seconds: float = Field(default=0.0, ge=0)
    """Seconds the job still takes once the gate is open (every run, the gate stays open)."""
    in_transaction: bool = False
    """Wait for the gate inside `ctx.transaction()`, after writing: a job whose transaction
    stays open long."""


@job("gated", args_model=GatedArgs)
async def gated(ctx: JobContext) -> dict[str, Any]:
    args: GatedArgs = ctx.args
    started = datetime.now(UTC)
    if not args.in_transaction:
        await _wait_for_gate(args)
    await asyncio.sleep(args.hold_seconds)
    async with ctx.transaction() as conn:
        await record_effect(conn, ctx, started)
        if args.in_transaction:
            await _wait_for_gate(args)
    return {"attempt": ctx.attempt}


async def _wait_for_gate(args: GatedArgs) -> None:
    deadline = asyncio.get_running_loop().time() + args.wait_seconds
    while not Path(args.gate).exists():
        if asyncio.get_running_loop().time() > deadline:
            raise RuntimeError(f"gate {args.gate} never opened")
        await asyncio.sleep(0.05)


@job("leak-session")
async def leak_session(ctx: JobContext) -> None:
    # Session state set inside the run's transaction outlives its COMMIT on that connection:
    # the pool must reset it before anyone else borrows the connection.
    async with ctx.transaction() as conn:
        await conn.execute("SET application_name = 'leaked-by-job'")


class ReadArgs(BaseModel):
    sleep: float = Field(default=0.0, ge=0)


@job("slow-read", read_only=True, args_model=ReadArgs)
async def slow_read(ctx: JobContext) -> dict[str, Any]:
    """A read-only job (allowed `overlap: allow_all`) that takes `sleep` seconds."""
    args: ReadArgs = ctx.args
    await asyncio.sleep(args.sleep)
    return {"key": ctx.logical_key}


ARGS_DDL = """
CREATE TABLE IF NOT EXISTS public.test_args (
    logical_key text  NOT NULL,
    args        jsonb NOT NULL
)
"""


class RecordsArgsArgs(BaseModel):
    label: str
    count: int = Field(default=0, ge=0)
    gate: str | None = None
    """A file the job waits for (up to a minute) before it writes: the test decides when a run
    of it finishes."""


@job("records-args", args_model=RecordsArgsArgs)
async def records_args(ctx: JobContext) -> dict[str, Any]:
    """Writes the args it was given, with its key, to `test_args` (no unique constraint: a key
    applied twice shows as two rows)."""
    args: RecordsArgsArgs = ctx.args
    if args.gate is not None:
        await _wait_for_gate(GatedArgs(gate=args.gate))
    async with ctx.transaction() as conn:
        await conn.execute(ARGS_DDL)
        await conn.execute(
            "INSERT INTO public.test_args (logical_key, args) VALUES ($1, $2::jsonb)",
            ctx.logical_key,
            args.model_dump_json(),
        )
    return {"label": args.label}
