"""CRONWARDEN_PAYLOAD_CODEC: the worker and the CLI encode every payload with the same codec, so
Temporal only stores what the codec made, and runs and re-applies still work."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import asyncpg
import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, ScheduleActionStartWorkflow

from cronwarden import temporal
from cronwarden.activities.contract import RAN, logical_key
from cronwarden.embedded import EmbeddedTemporal
from cronwarden.worker_runtime import run_worker
from tests.support.cli import cli
from tests.support.codecs import ENCODING
from tests.support.runs import FIRE, effects, start_run
from tests.support.schedules import write_schedules_file
from tests.support.servers import worker_settings

pytestmark = pytest.mark.integration

CODEC = "tests.support.codecs:CompressingCodec"


async def test_a_run_round_trips_through_the_codec_and_is_stored_encoded(
    temporal_server: EmbeddedTemporal,
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
) -> None:
    settings = worker_settings(temporal_server, task_queue, payload_codec=CODEC)
    coded = await temporal.connect(settings)
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(settings, client=coded, pool=pool, stop=stop))
    try:
        handle = await start_run(coded, task_queue, schedule_id)
        outcome = await asyncio.wait_for(handle.result(), timeout=30)
    finally:
        stop.set()
        await worker
    assert outcome.outcome == RAN
    assert await effects(pool, logical_key(schedule_id, FIRE)) == 1

    # Seen without the codec, as the server stores them: every payload is the codec's.
    stored: list[Payload] = []
    async for event in client.get_workflow_handle(handle.id).fetch_history_events():
        started = event.workflow_execution_started_event_attributes
        completed = event.workflow_execution_completed_event_attributes
        stored += [*started.input.payloads, *completed.result.payloads]
    assert len(stored) == 2
    assert {p.metadata["encoding"] for p in stored} == {ENCODING}


async def test_apply_with_a_codec_reads_its_own_schedules_back(
    tmp_path: Path, cli_env: dict[str, str], client: Client
) -> None:
    env = {**cli_env, "CRONWARDEN_PAYLOAD_CODEC": CODEC}
    sid = f"codec-{uuid.uuid4().hex[:8]}"
    path = write_schedules_file(
        tmp_path, f"schedules:\n  - id: {sid}\n    job: probe\n    every: 1h\n"
    )
    handle = client.get_schedule_handle(sid)
    try:
        first = await cli(env, "schedules", "apply", str(path))
        assert first.code == 0 and f"{sid}: created" in first.stdout, first
        second = await cli(env, "schedules", "apply", str(path))
        assert second.code == 0 and f"{sid}: unchanged" in second.stdout, second
        action = (await handle.describe()).schedule.action
        assert isinstance(action, ScheduleActionStartWorkflow) and action.memo
        assert {p.metadata["encoding"] for p in action.memo.values()} == {ENCODING}
    finally:
        await handle.delete()


async def test_a_codec_that_cannot_be_loaded_is_refused_with_one_sentence(
    cli_env: dict[str, str],
) -> None:
    for spec, expected in [
        ("tests.nowhere:Codec", "cannot import tests.nowhere"),
        ("tests.support.codecs:Missing", "tests.support.codecs has no attribute Missing"),
        ("tests.support.codecs:NOT_A_CODEC", "neither a temporalio PayloadCodec"),
        (
            "tests.support.codecs:codec_without_its_key",
            "tests.support.codecs:codec_without_its_key failed to make a codec: "
            "LookupError: CODEC_KEY is not set",
        ),
        ("no-colon", "must be module:attribute"),
    ]:
        result = await cli({**cli_env, "CRONWARDEN_PAYLOAD_CODEC": spec}, "worker")
        assert result.code == 2, result
        assert expected in result.stderr and "Traceback" not in result.stderr
