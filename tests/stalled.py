"""A stalled server, real on loopback: it accepts TCP connections, reads what is sent and never
answers (an HTTP upstream whose process hangs). It counts the connections it was sent."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class Stalled:
    def __init__(self) -> None:
        self.connections = 0
        self.url = ""
        self._writers: list[asyncio.StreamWriter] = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)
        with contextlib.suppress(Exception):
            while await reader.read(65536):
                pass


@contextlib.asynccontextmanager
async def stalled_server() -> AsyncIterator[Stalled]:
    stalled = Stalled()
    server = await asyncio.start_server(stalled._handle, "127.0.0.1", 0)
    stalled.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield stalled
    finally:
        server.close()
        for w in stalled._writers:
            w.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)
