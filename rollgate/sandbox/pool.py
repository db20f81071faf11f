"""A bounded warm pool in front of a provider with a start cost (containers, Pods).

`create()` hands out a pre-created sandbox when one is idle (else creates one directly) and wakes
the background filler, which keeps at most `size` idle sandboxes. Sandboxes are used once: a
destroyed one is never returned to the pool, so no state leaks from one user to the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from rollgate.sandbox.base import Sandbox, SandboxProvider

log = logging.getLogger(__name__)


class WarmPool:
    def __init__(self, provider: SandboxProvider, size: int = 4, *, retry_delay_s: float = 1.0):
        if size < 1:
            raise ValueError("pool size must be >= 1")
        self.provider = provider
        self.size = size
        self.name = provider.name
        self.retry_delay_s = retry_delay_s
        self._idle: list[Sandbox] = []
        self._wake = asyncio.Event()
        self._filler: asyncio.Task | None = None
        self._closed = False
        self.hits = 0
        self.misses = 0

    @property
    def idle(self) -> int:
        return len(self._idle)

    def capabilities(self) -> dict[str, Any]:
        return {**self.provider.capabilities(), "warm_pool": self.size}

    def start(self) -> None:
        if self._filler is None and not self._closed:
            self._filler = asyncio.get_running_loop().create_task(self._fill(), name="sandbox-warm-pool")

    async def _fill(self) -> None:
        while not self._closed:
            while len(self._idle) < self.size and not self._closed:
                try:
                    sandbox = await self.provider.create()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("warm pool: creating a %s sandbox failed; retrying", self.provider.name)
                    await asyncio.sleep(self.retry_delay_s)
                    continue
                if self._closed:
                    await sandbox.destroy()
                    return
                self._idle.append(sandbox)
            self._wake.clear()
            await self._wake.wait()

    async def wait_full(self, timeout_s: float = 30.0) -> None:
        """Wait until the pool holds `size` idle sandboxes (start-up, tests)."""
        self.start()
        async with asyncio.timeout(timeout_s):
            while len(self._idle) < self.size:
                await asyncio.sleep(0.01)

    async def create(self) -> Sandbox:
        self.start()
        if self._idle:
            self.hits += 1
            sandbox = self._idle.pop()
        else:
            self.misses += 1
            sandbox = await self.provider.create()
        self._wake.set()
        return sandbox

    async def close(self, timeout_s: float = 30.0) -> None:
        self._closed = True
        if self._filler is not None:
            # Let a create() in flight finish (the filler then destroys it): cancelling it would
            # lose a sandbox that is being made in a worker thread or an engine.
            self._wake.set()
            try:
                await asyncio.wait_for(asyncio.shield(self._filler), timeout_s)
            except TimeoutError:
                self._filler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._filler
        idle, self._idle = self._idle, []
        await asyncio.gather(*(s.destroy() for s in idle), return_exceptions=True)
        await self.provider.close()
