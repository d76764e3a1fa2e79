"""Schedules a test created, deleted after it whatever it did to them."""

from __future__ import annotations

from collections.abc import Iterable

from temporalio.client import Client

from cronwarden.schedules.inventory import describe_or_none


async def delete_schedules(client: Client, schedule_ids: Iterable[str]) -> None:
    """Delete each schedule of `schedule_ids` that exists."""
    for sid in schedule_ids:
        if await describe_or_none(client, sid) is not None:
            await client.get_schedule_handle(sid).delete()
