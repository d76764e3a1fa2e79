"""The matching-times stream against servers that break the paging contract: it must count each
time once and always end. Temporal's real answers are covered in
tests/integration/test_backfill_paging.py; a misbehaving server can only be played here."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.workflowservice.v1 import ListScheduleMatchingTimesRequest
from temporalio.client import Client

from cronwarden.backfill.plan import matching_times
from cronwarden.backfill.window import Window

START = datetime(2026, 11, 30, 4, tzinfo=UTC)
WINDOW = Window(START, START + timedelta(seconds=9))
S0 = int(START.timestamp())
MAX_CALLS = 50


def ts(seconds: int) -> Timestamp:
    return Timestamp(seconds=seconds)


@dataclass
class Response:
    start_time: list[Timestamp]


@dataclass
class Service:
    """Answers at most `page` times per call, after `start_time` or (buggy) from it."""

    times: list[int]
    page: int = 3
    start_inclusive: bool = False
    stuck: bool = False
    """Answer the first page again whatever is asked (the repeated-time bug)."""
    calls: list[int] = field(default_factory=list)

    async def list_schedule_matching_times(self, req: ListScheduleMatchingTimesRequest) -> Any:
        self.calls.append(req.start_time.seconds)
        assert len(self.calls) <= MAX_CALLS, "the stream keeps asking: it would loop for ever"
        after = S0 - 1 if self.stuck else req.start_time.seconds
        chosen = [
            t
            for t in self.times
            if (t >= after if self.start_inclusive else t > after) and t <= req.end_time.seconds
        ]
        return Response([ts(t) for t in chosen[: self.page]])


@dataclass
class FakeClient:
    workflow_service: Service
    namespace: str = "default"


async def stream(service: Service) -> list[int]:
    client = cast(Client, FakeClient(service))
    return [t async for page in matching_times(client, "nightly", WINDOW) for t in page]


async def test_a_server_that_repeats_the_same_times_ends_the_stream_with_each_time_once() -> None:
    service = Service(times=[S0, S0 + 1, S0 + 2, S0 + 5], stuck=True)
    assert await stream(service) == [S0, S0 + 1, S0 + 2]
    assert len(service.calls) == 2


async def test_a_server_that_answers_its_start_time_again_counts_each_time_once() -> None:
    every_second = list(range(S0, S0 + 10))
    service = Service(times=every_second, start_inclusive=True)
    assert await stream(service) == every_second


async def test_a_page_with_duplicate_times_counts_each_once() -> None:
    service = Service(times=[S0, S0, S0 + 4, S0 + 4, S0 + 9], page=10)
    assert await stream(service) == [S0, S0 + 4, S0 + 9]


async def test_the_stream_stops_once_it_reaches_the_window_end() -> None:
    service = Service(times=[S0 + 3, S0 + 9, S0 + 20], page=2)
    assert await stream(service) == [S0 + 3, S0 + 9]
    assert len(service.calls) == 1
