"""Redis clients as every part builds them: a bounded blocking connection pool, and one error
mapping (Redis down or slow is a transient UpstreamError naming the component)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from rollgate.core.batching import TurnBatch
from rollgate.core.errors import UpstreamError

T = TypeVar("T")


def bounded_client(url: str, *, max_connections: int, wait_s: float, socket_timeout: float) -> Any:
    """Past `max_connections` concurrent calls, callers wait up to `wait_s` for a free connection
    instead of failing with "Too many connections" (the default pool's answer past 100). Redis is
    single-threaded, so a few dozen connections already keep it busy."""
    import redis.asyncio as aioredis

    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=wait_s,
        decode_responses=False,
        socket_timeout=socket_timeout,
        socket_connect_timeout=5,
    )
    return aioredis.Redis.from_pool(pool)  # owns the pool: aclose() disconnects it


async def call(coro: Awaitable[T], *, component: str) -> T:
    import redis.exceptions as rexc

    try:
        return await coro
    except (rexc.ConnectionError, rexc.TimeoutError) as exc:
        raise UpstreamError(f"redis unreachable: {exc}", component=component, transient=True) from None


class ScriptBatch:
    """Lua script calls made during one turn of the event loop go to Redis as one pipeline: one
    connection checkout, one write and one read for all of them, instead of one each.

    At a few hundred episodes in flight a resources server makes hundreds of session-store calls
    per loop turn, and redis-py's per-command connection handling and socket writes were most of
    its client CPU (docs/benchmarks.md). Semantics do not change: each call is still one EVALSHA,
    atomic on the server, answered on its own future; an error of one call (a script error) is
    that call's alone. Only non-blocking scripts belong here."""

    def __init__(self, client: Any):
        self.client = client
        self._calls: TurnBatch[tuple[Any, list, list, Any]] = TurnBatch(self._run)

    def wrap(self, script: Any):
        """`script(keys=..., args=...)`, batched."""

        def call(keys: list, args: list) -> Awaitable[Any]:
            fut = asyncio.get_running_loop().create_future()
            self._calls.put((script, keys, args, fut))
            return fut

        return call

    async def _run(self, batch: list[tuple[Any, list, list, Any]]) -> None:
        if len(batch) == 1:  # nothing to share: the plain call is cheaper than a pipeline
            script, keys, args, fut = batch[0]
            try:
                result = await script(keys=keys, args=args)
            except Exception as exc:  # noqa: BLE001 - delivered to its caller
                _settle(fut, exc=exc)
            else:
                _settle(fut, result=result)
            return
        pipe = self.client.pipeline(transaction=False)
        for script, keys, args, _ in batch:
            await script(keys=keys, args=args, client=pipe)  # queues the EVALSHA
        try:
            results = await pipe.execute(raise_on_error=False)
        except Exception as exc:  # noqa: BLE001 - the connection failed: every call fails
            for *_, fut in batch:
                _settle(fut, exc=exc)
            return
        for (*_, fut), result in zip(batch, results, strict=True):
            if isinstance(result, Exception):
                _settle(fut, exc=result)
            else:
                _settle(fut, result=result)


def _settle(fut: Any, *, result: Any = None, exc: BaseException | None = None) -> None:
    if fut.done():  # the caller was cancelled
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)
