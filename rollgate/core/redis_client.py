"""Redis clients as every part builds them: a bounded blocking connection pool, and one error
mapping (Redis down or slow is a transient UpstreamError naming the component)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

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
