"""Redis clients as every part builds them: a bounded blocking connection pool (or a Redis Cluster
client for a `redis+cluster://` URL), and one error mapping (Redis down or slow is a transient
UpstreamError naming the component)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from rollgate.core.batching import TurnBatch
from rollgate.core.errors import UpstreamError

T = TypeVar("T")


CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def is_cluster_url(url: str | None) -> bool:
    """`redis+cluster://[:PASSWORD@]HOST:PORT[,HOST:PORT...]` (or `rediss+cluster://`): nodes of
    a Redis Cluster, which the client asks for the rest of the topology. Name several, so that a
    client starting while one of them is down still finds the cluster."""
    return bool(url) and url.split("://", 1)[0] in CLUSTER_SCHEMES


def cluster_client(url: str, *, max_connections: int, socket_timeout: float) -> Any:
    """A Redis Cluster client. It has no blocking pool: past its per-node limit a call fails, so
    the limit is generous (a node serves thousands of clients) and only guards against a leak."""
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    scheme, rest = url.split("://", 1)
    auth, _, hosts = rest.rpartition("@")
    hosts, slash, tail = hosts.partition("/")
    first, *others = hosts.split(",")
    seeds = []
    for h in others:
        host, _, port = h.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"redis URL: {h!r} is not HOST:PORT (redis+cluster://HOST:PORT,HOST:PORT)")
        seeds.append(ClusterNode(host, int(port)))
    return RedisCluster.from_url(
        f"{CLUSTER_SCHEMES[scheme]}://{auth + '@' if auth else ''}{first}{slash}{tail}",
        startup_nodes=seeds or None,
        max_connections=max(4 * max_connections, 256),
        decode_responses=False,
        socket_timeout=socket_timeout,
        socket_connect_timeout=5,
    )


def bounded_client(url: str, *, max_connections: int, wait_s: float, socket_timeout: float) -> Any:
    """Past `max_connections` concurrent calls, callers wait up to `wait_s` for a free connection
    instead of failing with "Too many connections" (the default pool's answer past 100). Redis is
    single-threaded, so a few dozen connections already keep it busy."""
    if is_cluster_url(url):
        return cluster_client(url, max_connections=max_connections, socket_timeout=socket_timeout)
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
    except (rexc.ClusterError, rexc.TryAgainError, rexc.RedisClusterException) as exc:
        # a failover in progress: a replica takes over the slot within the node timeout
        raise UpstreamError(f"redis cluster unavailable: {exc}", component=component, transient=True) from None


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
        from redis.exceptions import NoScriptError

        if len(batch) == 1:  # nothing to share: the plain call is cheaper than a pipeline
            script, keys, args, fut = batch[0]
            try:
                result = await script(keys=keys, args=args)
            except Exception as exc:  # noqa: BLE001 - delivered to its caller
                _settle(fut, exc=exc)
            else:
                _settle(fut, result=result)
            return
        # Raw EVALSHA: a cluster pipeline refuses script objects, and a plain pipeline holding
        # them asks SCRIPT EXISTS first on every execute (a round trip). A script the server does
        # not know (a restarted or newly promoted node) is run again on its own, which loads it.
        pipe = self.client.pipeline(transaction=False)
        for script, keys, args, _ in batch:
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        try:
            results = await pipe.execute(raise_on_error=False)
        except Exception as exc:  # noqa: BLE001 - the connection failed: every call fails
            for *_, fut in batch:
                _settle(fut, exc=exc)
            return
        for (script, keys, args, fut), result in zip(batch, results, strict=True):
            if isinstance(result, NoScriptError):
                try:
                    result = await script(keys=keys, args=args)
                except Exception as exc:  # noqa: BLE001 - delivered to its caller
                    result = exc
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
