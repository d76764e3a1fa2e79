"""Temporal's schedule list, read page by page with the next page already on its way.

`list` and `status` of ten thousand schedules spent about as long turning the list into rows
as Temporal took to send it, one after the other: the SDK's iterator asks for a page only once
the previous one is used up, and converts every field of every entry (each spec's calendars
among them) whether it is shown or not. Here the next page is requested before the current one
is handed out, so the two overlap, and entries stay protobufs: the caller reads the few fields
it shows, and converts a spec only for a schedule that has no recorded definition.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio.api.common.v1 import Payload
from temporalio.api.schedule.v1 import ScheduleListEntry
from temporalio.api.schedule.v1 import ScheduleSpec as ScheduleSpecProto
from temporalio.api.workflowservice.v1 import ListSchedulesRequest, ListSchedulesResponse
from temporalio.client import Client, ScheduleDescription, ScheduleSpec

from cronwarden.schedules.mapping import MANAGED_MEMO, marks_managed

PAGE_SIZE = 1000
"""Entries per ListSchedules call: the server's own cap for a page."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


async def list_pages(
    client: Client, *, page_size: int = PAGE_SIZE
) -> AsyncGenerator[Sequence[ScheduleListEntry], None]:
    """Every page of the namespace's schedule list, each page's successor requested before
    the page is yielded. A caller that stops early leaves no request behind."""

    def request(token: bytes) -> asyncio.Task[ListSchedulesResponse]:
        return asyncio.ensure_future(
            client.workflow_service.list_schedules(
                ListSchedulesRequest(
                    namespace=client.namespace, maximum_page_size=page_size, next_page_token=token
                ),
                retry=True,
            )
        )

    pending: asyncio.Task[ListSchedulesResponse] | None = request(b"")
    try:
        while pending is not None:
            response = await pending
            token = response.next_page_token
            pending = request(token) if token else None
            yield response.schedules
    finally:
        if pending is not None:
            pending.cancel()
            # Wait for it to end without taking its outcome: a cancellation of this reader
            # itself must still reach the reader's caller.
            await asyncio.wait([pending])
            if not pending.cancelled():
                pending.exception()  # retrieved, so asyncio does not log it as never retrieved


async def managed_markers(
    client: Client, entries: Sequence[ScheduleListEntry]
) -> list[bool | None]:
    """For each entry, whether `apply` created it (None: its marker cannot be decoded), as
    `inventory.managed_marker` says for one schedule, with the page's markers decoded in one
    call. Only our own memo key is decoded: another team's keys may need a codec we lack."""
    markers: list[bool | None] = [False] * len(entries)
    indexed = [
        (i, e.memo.fields[MANAGED_MEMO])
        for i, e in enumerate(entries)
        if MANAGED_MEMO in e.memo.fields
    ]
    if not indexed:
        return markers
    payloads = [payload for _, payload in indexed]
    try:
        values = await client.data_converter.decode(payloads)
    except Exception:
        values = []
    if len(values) != len(payloads):
        # One unreadable marker fails the whole call (and a codec may hand back fewer payloads
        # than it was given): decode each alone, so only an unreadable one is lost.
        values = [await _decoded_or_unreadable(client, payload) for payload in payloads]
    for (i, _), value in zip(indexed, values, strict=True):
        markers[i] = None if value is _UNREADABLE else marks_managed(value)
    return markers


_UNREADABLE = object()


async def _decoded_or_unreadable(client: Client, payload: Payload) -> object:
    try:
        return (await client.data_converter.decode([payload]))[0]
    except Exception:  # an unknown encoding or a codec that refuses it: unreadable, not fatal
        return _UNREADABLE


def next_action_times(entry: ScheduleListEntry) -> list[datetime]:
    """The listed next fire times, in UTC (microseconds, as the SDK gives them)."""
    return [
        _EPOCH + timedelta(seconds=t.seconds, microseconds=t.nanos // 1000)
        for t in entry.info.future_action_times
    ]


def listed_spec(entry: ScheduleListEntry) -> ScheduleSpec:
    """The entry's spec as the SDK's type, for a schedule shown by Temporal's spec (no recorded
    definition): the SDK's own conversion, which its list iterator applies to every entry."""
    return ScheduleSpec._from_proto(entry.info.spec)


def listed_digest(spec: ScheduleSpecProto, workflow_type: str) -> str:
    """A digest of what Temporal's schedule list shows of a schedule's definition: its spec (as
    Temporal holds it, cron strings already turned into calendars) and its workflow type.

    The list carries neither the action (args, task queue, memo) nor the policies, so this is
    the part of an edit made outside cronwarden that a list read can notice. Computed the same
    way from a describe (`described_listed_digest`), whose spec is the one the list shows.
    """
    shown = ScheduleSpecProto()
    shown.CopyFrom(spec)
    # The list drops the time zone's data; cronwarden never sets a time zone, but a schedule
    # edited to have one must hash alike from a describe and from the list.
    shown.ClearField("timezone_data")
    digest = hashlib.sha256(shown.SerializeToString(deterministic=True))
    digest.update(b"\0" + workflow_type.encode())
    return digest.hexdigest()


def described_listed_digest(desc: ScheduleDescription) -> str:
    """`listed_digest` of a described schedule."""
    schedule = desc.raw_description.schedule
    return listed_digest(schedule.spec, schedule.action.start_workflow.workflow_type.name)


@dataclass(frozen=True)
class Listed:
    """One schedule as one read of the list shows it, for `apply`'s plan."""

    managed: bool | None
    """As `managed_markers` says: None when the marker cannot be decoded."""
    listed_digest: str | None
    """None when the entry came without its details (a server without advanced visibility)."""
    next_fire: datetime | None


async def read_listing(client: Client, *, page_size: int = PAGE_SIZE) -> dict[str, Listed]:
    """Every schedule of the namespace from one paged read of Temporal's schedule list.

    The list is eventually consistent: a schedule created, edited or deleted a moment ago may
    show as it was before.
    """
    found: dict[str, Listed] = {}
    async with contextlib.aclosing(list_pages(client, page_size=page_size)) as pages:
        async for page in pages:
            markers = await managed_markers(client, page)
            for entry, marker in zip(page, markers, strict=True):
                if not entry.HasField("info"):
                    found[entry.schedule_id] = Listed(marker, None, None)
                    continue
                times = next_action_times(entry)
                found[entry.schedule_id] = Listed(
                    marker,
                    listed_digest(entry.info.spec, entry.info.workflow_type.name),
                    times[0] if times else None,
                )
    return found
