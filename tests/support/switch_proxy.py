"""A TCP proxy in front of Postgres that a test switches off and on: off, nothing listens on its
port (connections are refused, open ones are cut); on again, the same port and DSN reach the
same database. A database outage without stopping the session's Postgres."""

from __future__ import annotations

import asyncio

from tests.support.pgwire import RoundTripProxy


class SwitchProxy(RoundTripProxy):
    def __init__(self, target_host: str, target_port: int) -> None:
        super().__init__(target_host, target_port, label=lambda _query: "query")
        self._listen_port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self._listen_port)
        self._port = self._listen_port = self._server.sockets[0].getsockname()[1]

    async def off(self) -> None:
        """Stop listening and cut every connection."""
        await self.stop()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def on(self) -> None:
        await self.start()
