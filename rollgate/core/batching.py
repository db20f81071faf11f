"""Work put during one turn of the event loop, handled together by one task on the next turn.

Many coroutines of one process each make a small I/O call in the same loop turn (hundreds of
episodes in flight); handing them over together costs one system call (or one Redis pipeline)
instead of one each. The internal channel's frames (core/channel.py) and the session store's and
job queue's Lua scripts (core/redis_client.ScriptBatch) go through it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class TurnBatch(Generic[T]):
    """`put(item)` now; `handle(items)` gets everything put up to its start, then whatever was
    put while it ran, until nothing is left. `handle` must deliver its own errors."""

    def __init__(self, handle: Callable[[list[T]], Awaitable[None]]):
        self._handle = handle
        self._items: list[T] = []
        self._task: asyncio.Task | None = None

    def put(self, item: T) -> None:
        self._items.append(item)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self._items:
                items, self._items = self._items, []
                await self._handle(items)
        finally:
            self._task = None
