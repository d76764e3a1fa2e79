"""Demo jobs: a mutating ledger posting and a read-only balance digest.

`post-interest` shows the pattern every mutating job follows: slow work first with no
transaction open, then its writes through `ctx.transaction()`, where they commit together with
the run's outbox record — or not at all.
"""

from __future__ import annotations

import asyncio
from importlib import resources
from typing import Any

from pydantic import BaseModel, Field

from cronwarden import JobContext, job


class InterestArgs(BaseModel):
    account: str = "savings"
    amount_cents: int = Field(default=125, gt=0)
    think_seconds: float = Field(default=0.5, ge=0, le=60)
    """Pretend to call a slow rate service before posting."""


@job("post-interest", args_model=InterestArgs)
async def post_interest(ctx: JobContext) -> dict[str, Any]:
    args: InterestArgs = ctx.args
    await asyncio.sleep(args.think_seconds)  # the long part: no transaction is open here
    async with ctx.transaction() as conn:
        # Double entry: both legs carry the logical key, and land only with the outbox record.
        await conn.executemany(
            "INSERT INTO public.demo_ledger (logical_key, account, amount_cents)"
            " VALUES ($1, $2, $3)",
            [
                (ctx.logical_key, args.account, args.amount_cents),
                (ctx.logical_key, "interest-expense", -args.amount_cents),
            ],
        )
    ctx.log.info("demo.interest-posted", account=args.account, amount_cents=args.amount_cents)
    return {"account": args.account, "amount_cents": args.amount_cents}


@job("ledger-digest", read_only=True)
async def ledger_digest(ctx: JobContext) -> dict[str, Any]:
    async with ctx.transaction() as conn:
        rows = await conn.fetch(
            "SELECT account, sum(amount_cents)::bigint AS balance FROM public.demo_ledger"
            " GROUP BY account ORDER BY account"
        )
    return {"balances": {r["account"]: r["balance"] for r in rows}}


# Run by `cronwarden dev` after the migrations (and by the compose stack's Postgres).
DEV_SETUP_SQL = (
    resources.files("cronwarden.examples").joinpath("ledger_setup.sql").read_text(encoding="utf-8")
)
