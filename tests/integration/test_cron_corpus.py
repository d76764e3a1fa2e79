"""Our cron check against Temporal's own parser: a corpus of published, malformed and
foreign-dialect expressions goes to both, and ours may never accept what Temporal refuses, nor
refuse what Temporal accepts unless it names a lint rule."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.service import RPCError

from cronwarden.schedules.cron import CronLint
from cronwarden.schedules.firing import check_cron

pytestmark = pytest.mark.integration

# The reasons we may refuse an expression Temporal would take, each explained to the user.
LINT_RULES = {"tz-prefix", "no-comment", "nth-weekday", "use-every", "uneven-step", "never-fires"}

CORPUS = [
    # Temporal's documentation and SDK samples.
    "0 12 * * MON-FRI",
    "0 0 * * *",
    "*/15 * * * *",
    "30 2 * * *",
    "0 12 * * 5",
    "@daily",
    "@hourly",
    "@weekly",
    "@monthly",
    "@yearly",
    "@annually",
    "@midnight",
    "@every 10m",
    "@every 1h/15m",
    "CRON_TZ=America/New_York 0 9 * * *",
    "TZ=Europe/Paris 0 2 * * *",
    "CRON_TZ=Mars/Olympus 0 2 * * *",
    "0 9 * * mon-fri # weekday standup",
    # The seven-field form: seconds first, year last.
    "*/10 * * * * * *",
    "30 0 9 * * mon-fri *",
    "0 0 0 1 1 * 2030",
    "0 30 10 * * * 2030-2040/5",
    "59 59 23 31 12 * 2099",
    "60 * * * * * *",
    "*/7 * * * * * *",
    # crontab(5) and crontab.guru examples.
    "5 4 * * sun",
    "0 22 * * 1-5",
    "23 0-20/2 * * *",
    "0 0,12 1 */2 *",
    "0 4 8-14 * *",
    "0 0 1,15 * 3",
    "5 0 * 8 *",
    "15 14 1 * *",
    "0 0 * * 7",
    "0 0 * * 0-7",
    "0 0 1 JAN *",
    "0 0 1 January,july *",
    "0 0 * * Tu",
    "0 0 * * tues",
    "0 */4 * * *",
    "0 */5 * * *",
    "*/7 * * * *",
    "1-59/2 * * * *",
    "*/90 * * * *",
    "+5 * * * *",
    "05 04 * * *",
    "0 0 1 1 * 2030",
    "0 0 * * * 2001",
    "0 0 30 2 *",
    "0 0 31 4,6,9,11 *",
    "0 0 29 2 * 2027",
    "0 0 29 2 * 2028",
    # Kubernetes CronJob and GitHub Actions examples.
    "*/1 * * * *",
    "0 * * * *",
    "30 5,17 * * *",
    "0 0 * * 1/7",
    # Quartz, AWS EventBridge and Spring (foreign dialects).
    "0 0 12 * * ?",
    "0 15 10 ? * MON-FRI",
    "0 15 10 L * ?",
    "0 15 10 ? * 6L",
    "0 15 10 15W * ?",
    "0 9 * * mon#2",
    "0 15 10 ? * 6#3",
    "0 0/5 14 * * ? 2030",
    "cron(0 12 * * ? *)",
    "rate(5 minutes)",
    "@reboot",
    "@every",
    # Malformed.
    "",
    "0 2 * *",
    "0 0 0 0 2 * * * *",
    "61 * * * *",
    "0 24 * * *",
    "0 0 0 * *",
    "0 0 * 13 *",
    "0 0 * * 8",
    "0 0 1 ju *",
    "0 0 * * m",
    "0 0 * * sat-sun",
    "5-1 * * * *",
    "1-5-7 * * * *",
    "3/5/7 * * * *",
    "5/ * * * *",
    "*/0 * * * *",
    "/5 * * * *",
    "-1 * * * *",
    ",1 * * * *",
    "1,,2 * * * *",
    "*/99999999999999999999 * * * *",
    "0 0 1 1 * 1999",
    "0 0 1 1 * 2101",
    "a b c d e",
]


def our_verdict(expr: str) -> tuple[str, str | None]:
    try:
        check_cron(expr, now=datetime.now(UTC))
    except CronLint as exc:
        return "lint", exc.rule
    except ValueError:
        return "refused", None
    return "accepted", None


async def temporal_accepts(client: Client, expr: str) -> bool:
    schedule_id = f"corpus-{uuid.uuid4().hex[:12]}"
    schedule = Schedule(
        action=ScheduleActionStartWorkflow("Corpus", id=schedule_id, task_queue="corpus-never"),
        spec=ScheduleSpec(cron_expressions=[expr]),
        # Paused: nothing may start, the test only asks whether the spec is taken.
        state=ScheduleState(paused=True),
    )
    try:
        handle = await client.create_schedule(schedule_id, schedule)
    except RPCError:
        return False
    await handle.delete()
    return True


async def test_our_cron_check_agrees_with_temporal_on_a_corpus_of_published_expressions(
    client: Client,
) -> None:
    disagreements = []
    lints = 0
    for expr in CORPUS:
        ours, rule = our_verdict(expr)
        theirs = await temporal_accepts(client, expr)
        if ours == "accepted" and not theirs:
            disagreements.append(f"{expr!r}: we accept it, Temporal refuses it")
        elif ours == "refused" and theirs:
            disagreements.append(f"{expr!r}: we refuse it without a lint rule, Temporal takes it")
        elif ours == "lint":
            lints += 1
            if rule not in LINT_RULES:
                disagreements.append(f"{expr!r}: refused for an unnamed rule {rule!r}")
    assert disagreements == []
    # The corpus exercises both sides: some expressions each way, and some lint refusals.
    verdicts = [our_verdict(e)[0] for e in CORPUS]
    assert verdicts.count("accepted") >= 30
    assert verdicts.count("refused") >= 25
    assert lints >= 10
