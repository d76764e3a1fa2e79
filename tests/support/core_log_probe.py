"""`python -m tests.support.core_log_probe ADDRESS`: connect the way every cronwarden command does,
through a TCP relay to ADDRESS, cut the relay, make one call the SDK retries, then print one
JSON document on stdout, as a `--json` command would. The SDK core warns on every retry."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys

from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.service import RPCError

from cronwarden import temporal
from cronwarden.cli.app import leave
from cronwarden.config import Settings


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


async def main(target: str) -> None:
    host, port = target.rsplit(":", 1)
    writers: list[asyncio.StreamWriter] = []

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writers.extend((writer, up_writer))
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    relay_port = server.sockets[0].getsockname()[1]
    settings = Settings(_env_file=None, temporal_address=f"127.0.0.1:{relay_port}")  # type: ignore[call-arg]
    client = await temporal.connect(settings)
    server.close()
    for writer in writers:
        writer.close()
    outcome = "answered"
    try:
        # Long enough for several retries (each one warns); the SDK may give up first.
        await asyncio.wait_for(
            client.workflow_service.get_system_info(GetSystemInfoRequest(), retry=True), 6
        )
    except (TimeoutError, RPCError) as exc:
        outcome = type(exc).__name__
    print(json.dumps({"outcome": outcome}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
    # As every cronwarden command ends: the retried call goes on in the SDK's threads, and its
    # next warning must not meet a finalizing interpreter.
    leave(0)
