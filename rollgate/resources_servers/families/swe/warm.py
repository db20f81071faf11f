"""A warm pool of sandboxes that already hold a project's pristine checkout.

Writing a whole repository into a fresh sandbox is most of a seed's cost; a task differs from the
pristine tree in a few files (the mutated module, the test files its hidden targets are cut from).
The pool keeps up to `size` sandboxes made and filled ahead of time, so a seed takes one and
writes only those few files. Each sandbox is handed out once and destroyed by its session, never
returned: nothing one session did can reach the next.

The filler runs on an event loop of its own, in one daemon thread per pool, so the pool serves
callers on any loop or thread (a resources service, a benchmark, tests with a loop per test);
`take` is guarded by a lock. A failed fill is logged and not retried until the next `take`, so a
broken provider costs one attempt per seed, not a busy loop. `aclose` waits for the fills in
flight and destroys every idle sandbox.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable

from rollgate.sandbox import Sandbox, SandboxProvider

log = logging.getLogger("rollgate.envs.swe")


class CheckoutPool:
    def __init__(
        self, provider: SandboxProvider, prepare: Callable[[Sandbox], Awaitable[None]], size: int, *, name: str
    ):
        if size < 1:
            raise ValueError("warm pool size must be >= 1")
        self.provider = provider
        self.prepare = prepare
        self.size = size
        self.name = name
        self._lock = threading.Lock()
        self._idle: deque[Sandbox] = deque()
        self._making = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self.hits = 0
        self.misses = 0
        self.failures = 0

    @property
    def idle(self) -> int:
        return len(self._idle)

    def _start(self) -> asyncio.AbstractEventLoop | None:
        with self._lock:
            if self._loop is None and not self._closed:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name=f"swe-pool-{self.name}", daemon=True
                )
                self._thread.start()
            return self._loop

    def refill(self) -> None:
        """Start fills until idle + in flight reaches `size`."""
        loop = self._start()
        with self._lock:
            if self._closed or loop is None:
                return
            want = max(0, self.size - len(self._idle) - self._making)
            self._making += want
        for _ in range(want):
            asyncio.run_coroutine_threadsafe(self._make_one(), loop)

    async def _make_one(self) -> None:
        try:
            box = await self.provider.create()
            try:
                await self.prepare(box)
            except BaseException:
                await box.destroy()
                raise
        except Exception as exc:
            log.warning("%s: filling a warm sandbox failed (next seed retries): %s", self.name, exc)
            with self._lock:
                self._making -= 1
                self.failures += 1
            return
        with self._lock:
            self._making -= 1
            keep = not self._closed
            if keep:
                self._idle.append(box)
        if not keep:
            await box.destroy()

    async def take(self) -> Sandbox | None:
        """A sandbox holding the pristine checkout, or None when none is ready (the caller makes
        one); either way the pool is topped up in the background."""
        with self._lock:
            box = self._idle.popleft() if self._idle else None
            if box is None:
                self.misses += 1
            else:
                self.hits += 1
        self.refill()
        return box

    async def wait_full(self, timeout_s: float = 60.0) -> None:
        """Until `size` sandboxes are idle (start-up, benchmarks, tests)."""
        self.refill()
        deadline = time.monotonic() + timeout_s
        while len(self._idle) < self.size:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: warm pool holds {self.idle} of {self.size} after {timeout_s}s")
            if self._making == 0:
                self.refill()  # a fill failed: try again
            await asyncio.sleep(0.02)

    async def _drain(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self._making and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        with self._lock:
            idle, self._idle = list(self._idle), deque()
        await asyncio.gather(*(b.destroy() for b in idle), return_exceptions=True)

    async def aclose(self, timeout_s: float = 60.0) -> None:
        """Stop filling, wait for the fills in flight, destroy every idle sandbox."""
        with self._lock:
            self._closed = True
            loop, thread = self._loop, self._thread
            self._loop = None  # a second aclose has nothing to do
        if loop is None or thread is None:
            return
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._drain(timeout_s), loop))
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, 10)
        if not thread.is_alive():
            loop.close()
