"""A minimal HTTP GET for probing the health endpoints the way a kubelet does."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]


async def http_get(port: int, path: str, *, method: str = "GET", timeout: float = 5.0) -> Answer:
    """One request to 127.0.0.1:`port`; a refused connection is status 0."""
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"{method} {path} HTTP/1.1\r\nHost: probe\r\n\r\n".encode())
            await writer.drain()
            raw = await reader.read()
            writer.close()
            await writer.wait_closed()
    except ConnectionRefusedError:
        return Answer(0, {})
    head, _, payload = raw.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    return Answer(status, json.loads(payload) if payload else {})
