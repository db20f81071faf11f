"""A bounded pool for CPU-heavy request work (templating and tokenizing a long prompt), so the
event loop keeps answering /healthz and small requests while it runs.

Bounded twice: `workers` threads run jobs, and at most `max_waiting` more wait for one; past that
a request is refused with 503 and Retry-After instead of queueing without end. Threads help
because the heavy part (a Rust tokenizer) releases the GIL."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from rollgate.core.errors import CapacityError

T = TypeVar("T")


class CpuPool:
    def __init__(self, name: str, *, workers: int = 2, max_waiting: int = 16, component: str = "rollgate"):
        if workers < 1 or max_waiting < 0:
            raise ValueError("workers must be >= 1 and max_waiting >= 0")
        self.name = name
        self.component = component
        self.limit = workers + max_waiting
        self.busy = 0  # jobs running or waiting (touched on the event loop only)
        self._executor: ThreadPoolExecutor | None = None  # started on first use
        self._workers = workers

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        if self.busy >= self.limit:
            raise CapacityError(
                f"{self.busy} large requests are being prepared already (the {self.name} pool's limit); retry later",
                component=self.component,
                retry_after_s=1.0,
            )
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._workers, thread_name_prefix=f"rollgate-{self.name}")
        self.busy += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        finally:
            self.busy -= 1

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


def text_size(value: Any, *, stop_at: int) -> int:
    """Characters of the strings in `value` (a parsed JSON body), counted until `stop_at`: what
    templating and tokenizing a request cost grows with. Lists of numbers (echoed token ids)
    count one per element, without being walked."""
    total = 0
    stack = [value]
    while stack and total <= stop_at:
        node = stack.pop()
        if type(node) is str:
            total += len(node)
        elif type(node) is dict:
            stack.extend(node.values())
        elif type(node) is list:
            if node and type(node[0]) in (int, float):
                total += len(node)
            else:
                stack.extend(node)
    return total
