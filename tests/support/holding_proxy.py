"""A TCP proxy in front of Temporal that can hold its answers: requests go through, answers wait
until released. A call Temporal has carried out whose answer never came back in time (the
caller gave up, or was cancelled) is made on purpose this way."""

from __future__ import annotations

import asyncio
import contextlib


class HoldingProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._open = asyncio.Event()
        self._open.set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        assert self._port is not None, "the proxy is not started"
        return f"127.0.0.1:{self._port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self._port = self._server.sockets[0].getsockname()[1]

    def hold(self) -> None:
        """From now on, answers wait (requests still reach Temporal)."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    async def stop(self) -> None:
        self.release()
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        pumps = [
            asyncio.create_task(self._pump(reader, up_writer, gate=None)),
            asyncio.create_task(self._pump(up_reader, writer, gate=self._open)),
        ]
        for task in pumps:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for task in pumps:
            task.cancel()
        for w in (writer, up_writer):
            with contextlib.suppress(OSError):
                w.close()

    @staticmethod
    async def _pump(
        source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, gate: asyncio.Event | None
    ) -> None:
        while data := await source.read(65536):
            if gate is not None:
                await gate.wait()
            sink.write(data)
            await sink.drain()
