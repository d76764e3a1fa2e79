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
    """One request to 127.0.0.1:`port`, its body JSON; a refused connection is status 0."""
    status, payload = await http_get_text(port, path, method=method, timeout=timeout)
    return Answer(status, json.loads(payload) if payload else {})


async def http_get_text(
    port: int, path: str, *, method: str = "GET", timeout: float = 5.0
) -> tuple[int, str]:
    """One request to 127.0.0.1:`port`: the status and the body as text (status 0: refused)."""
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            await writer.drain()
            raw = await reader.read()
            writer.close()
            await writer.wait_closed()
    except ConnectionRefusedError:
        return 0, ""
    head, _, payload = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), payload.decode()
