"""A job whose failure quotes every secret it can find, the way real ones do by accident: its
exception names the Slack webhook URL and the DSN it was configured with, a URL with
credentials, a bearer token and a query-string token, wraps a token across a line break, spells
one percent-encoded, carries bytes that are not UTF-8 and a NUL, and chains a cause that quotes
the PagerDuty routing key. The unconfigured secrets come from `LEAKY_PLANTED` (JSON)."""

from __future__ import annotations

import json
import os
from urllib.parse import quote

from pydantic import BaseModel, Field

from cronwarden import JobContext, job

PLANTED = "LEAKY_PLANTED"


class LeakyArgs(BaseModel):
    padding: int = Field(default=0, ge=0)
    """Characters of filler before the last secret: an error text far past what is kept."""


def leaky_message(planted: dict[str, str], padding: int = 0) -> str:
    slack = os.environ["CRONWARDEN_SLACK_WEBHOOK_URL"]
    token = slack.rsplit("/", 1)[-1]
    not_utf8 = os.fsdecode(b"\xff\xfe")  # lone surrogates, as a file name read raw gives
    return (
        f"could not post to {slack} (encoded: {quote(slack, safe='')}) nor reach "
        f"{os.environ['CRONWARDEN_DATABASE_URL']}; mirror "
        f"https://deploy:{planted['url_password']}@git.example/repo.git failed; "
        f"GET https://api.example/v1/items?page=2&token={planted['query_token']} answered 401; "
        f"headers {{'Authorization': 'Bearer {planted['bearer']}'}}\n"
        f"wrapped: {token[:10]}\n    {token[10:]}\n"
        f"bytes: {not_utf8} nul: \x00 " + "." * padding + f" at last: {slack}"
    )


@job("leaky", args_model=LeakyArgs)
async def leaky(ctx: JobContext) -> None:
    planted = json.loads(os.environ[PLANTED])
    args: LeakyArgs = ctx.args
    try:
        raise ConnectionError(
            f"PagerDuty refused routing key {os.environ['CRONWARDEN_PAGERDUTY_ROUTING_KEY']}"
        )
    except ConnectionError as cause:
        raise RuntimeError(leaky_message(planted, args.padding)) from cause
