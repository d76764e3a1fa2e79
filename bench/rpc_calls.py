"""Count the RPCs a Temporal client sends, at the edge.

Every call of the SDK, whether through the high-level client (`create_schedule`, a schedule
handle's `describe`) or through `client.workflow_service` directly (as `apply` sends its
conflict-token update), ends in the service client's `_rpc_call`. Wrapping that one method of
one client counts all of them, and nothing of any other client.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from temporalio.client import Client

# RPCs that only read. Anything else (create, update, patch, delete, start, signal, ...) writes.
_READ_PREFIXES = ("describe_", "list_", "get_", "count_", "scan_", "poll_")


class RpcCalls(Counter[str]):
    """RPC name -> number of calls."""

    @property
    def writes(self) -> dict[str, int]:
        return {rpc: n for rpc, n in self.items() if not rpc.startswith(_READ_PREFIXES)}

    @property
    def write_count(self) -> int:
        return sum(self.writes.values())

    @property
    def read_count(self) -> int:
        return sum(self.values()) - self.write_count


@contextmanager
def counting_rpcs(client: Client) -> Iterator[RpcCalls]:
    """Count every RPC `client` sends inside the block."""
    service: Any = client.service_client
    original = service._rpc_call
    calls = RpcCalls()

    async def counted(rpc: str, *args: Any, **kwargs: Any) -> Any:
        calls[rpc] += 1
        return await original(rpc, *args, **kwargs)

    service._rpc_call = counted
    try:
        yield calls
    finally:
        # The instance attribute shadowed the class's method; removing it restores that.
        del service._rpc_call
