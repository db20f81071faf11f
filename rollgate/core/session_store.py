"""Session stores: where resources servers keep per-session state.

One interface, two implementations: `MemorySessionStore` (the embedded default) and
`RedisSessionStore` (shared by many replicas of one environment). Both give:
- atomic read-modify-write per session (`update`), serialised by a per-session lock, so a
  tool with side effects is never run twice and concurrent calls never lose an update;
- sliding TTL expiry (every touch renews the lease);
- a capacity limit that answers `CapacityError` instead of growing without end;
- explicit delete.
Session ids are random 192-bit tokens: one session cannot be reached through another's id.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import secrets
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from rollgate.core import jsonutil
from rollgate.core.errors import CapacityError, NotFound
from rollgate.core.redis_client import ScriptBatch, bounded_client, call, is_cluster_url

T = TypeVar("T")
Mutator = Callable[[dict[str, Any]], "T | Awaitable[T]"]


def new_session_id() -> str:
    return secrets.token_urlsafe(24)


class SessionStore(Protocol):
    ttl_s: float
    capacity: int

    async def create(self, data: dict[str, Any]) -> str: ...
    async def get(self, session_id: str) -> dict[str, Any]: ...
    async def update(self, session_id: str, fn: Mutator) -> Any: ...
    async def delete(self, session_id: str) -> bool: ...
    async def take(self, session_id: str) -> dict[str, Any]: ...  # get and delete, in one step
    async def count(self) -> int: ...
    async def close(self) -> None: ...


async def _apply(fn: Mutator, data: dict[str, Any]) -> Any:
    result = fn(data)
    if inspect.isawaitable(result):
        result = await result
    return result


def _not_found(session_id: str) -> NotFound:
    return NotFound(f"unknown or expired session {session_id[:8]}...", component="store", field="session_id")


class MemorySessionStore:
    """In-process store. Sync mutators need no lock (no await between read and write);
    async ones take the session's lock."""

    def __init__(self, *, ttl_s: float = 3600.0, capacity: int = 100_000):
        self.ttl_s = ttl_s
        self.capacity = capacity
        self._data: dict[str, tuple[dict[str, Any], float]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._next_sweep = 0.0

    def _sweep(self, now: float, force: bool = False) -> None:
        if now < self._next_sweep and not force:
            return
        self._next_sweep = now + min(1.0, self.ttl_s / 4)
        dead = [k for k, (_, exp) in self._data.items() if exp <= now]
        for k in dead:
            self._data.pop(k, None)
            self._locks.pop(k, None)

    def _live(self, session_id: str) -> dict[str, Any]:
        now = time.monotonic()
        item = self._data.get(session_id)
        if item is None or item[1] <= now:
            if item is not None:
                self._data.pop(session_id, None)
                self._locks.pop(session_id, None)
            raise _not_found(session_id)
        self._data[session_id] = (item[0], now + self.ttl_s)
        return item[0]

    async def create(self, data: dict[str, Any]) -> str:
        now = time.monotonic()
        self._sweep(now)
        if len(self._data) >= self.capacity:
            self._sweep(now, force=True)
            if len(self._data) >= self.capacity:
                raise CapacityError(f"session store is full ({self.capacity} live sessions)", component="store")
        sid = new_session_id()
        # Deep copy through JSON: what the store holds is exactly what Redis would hold.
        self._data[sid] = (jsonutil.loads(jsonutil.dumps(data)), now + self.ttl_s)
        return sid

    async def get(self, session_id: str) -> dict[str, Any]:
        return jsonutil.loads(jsonutil.dumps(self._live(session_id)))

    async def update(self, session_id: str, fn: Mutator) -> Any:
        data = self._live(session_id)
        if not inspect.iscoroutinefunction(fn):
            work = jsonutil.loads(jsonutil.dumps(data))
            result = fn(work)
            if inspect.isawaitable(result):  # a sync callable that returned an awaitable
                result = await result
            self._commit(session_id, work)
            return result
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        async with lock:
            work = jsonutil.loads(jsonutil.dumps(self._live(session_id)))
            result = await fn(work)
            self._commit(session_id, work)
            return result

    def _commit(self, session_id: str, work: dict[str, Any]) -> None:
        if session_id not in self._data:
            raise _not_found(session_id)  # deleted while the mutator ran
        self._data[session_id] = (work, time.monotonic() + self.ttl_s)

    async def delete(self, session_id: str) -> bool:
        self._locks.pop(session_id, None)
        return self._data.pop(session_id, None) is not None

    async def take(self, session_id: str) -> dict[str, Any]:
        data = self._live(session_id)
        await self.delete(session_id)
        return data

    async def count(self) -> int:
        self._sweep(time.monotonic())
        return len(self._data)

    async def close(self) -> None:
        self._data.clear()


# Redis ------------------------------------------------------------------------------------

_CREATE = """
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[4])
redis.call('SET', KEYS[2], ARGV[5], 'PX', ARGV[3])
return 1
"""

# Write only while we still hold the lock: a holder whose lease ran out must not clobber.
_COMMIT = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('DEL', KEYS[2]) return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('ZADD', KEYS[3], tonumber(ARGV[4]) + tonumber(ARGV[3]), ARGV[5])
redis.call('DEL', KEYS[2])
return 1
"""

# Take the update lock and read the session in one round trip (a missing session takes no lock).
_LOCK_GET = """
local v = redis.call('GET', KEYS[1])
if not v then return {-1} end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1, v} end
return {0}
"""

# One round trip instead of a MULTI/EXEC pipeline (which costs redis-py three times as much).
_DELETE = """
local n = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return n
"""

_TAKE = """
local v = redis.call('GET', KEYS[1])
if not v then return false end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return v
"""

_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def cluster_shards(capacity: int) -> int:
    """How many capacity shards a store on a Redis Cluster spreads its sessions over: enough to
    spread over the primaries, few enough that each shard's share of the capacity is large
    (shares of a few hundred vary by a few percent with random ids)."""
    return max(1, min(64, capacity // 1000))


class RedisSessionStore:
    """Sessions in Redis, shared by every replica of one environment.

    Keys, per shard `{prefix}:{<prefix>#<n>}` (the hash tag puts a session's keys and its
    shard's capacity set in one Redis Cluster slot): `...:s:{id}` (JSON, PX ttl), `...:lock:{id}`
    (update lock, PX lease), `...:live` (ZSET of ids by expiry, for the capacity limit). One Redis
    server has one shard; a cluster `cluster_shards(capacity)`, each holding an equal share of the
    capacity, so every script touches one slot. A create that finds its shard full tries a few
    other ids (other shards) first, so the store refuses only when nearly all of it is full."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "rollgate:sessions",
        ttl_s: float = 3600.0,
        capacity: int = 100_000,
        lock_lease_s: float = 120.0,
        lock_wait_s: float = 60.0,
        max_connections: int = 64,
        client: Any = None,
    ):
        self.url = url
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.capacity = capacity
        self.lock_lease_s = lock_lease_s
        self.lock_wait_s = lock_wait_s
        self._r = client or bounded_client(url, max_connections=max_connections, wait_s=lock_wait_s, socket_timeout=10)
        # Every replica derives the same shards from the same settings.
        self.shards = cluster_shards(capacity) if is_cluster_url(url) else 1
        self._shard_capacity = math.ceil(capacity / self.shards)
        self._bases = [f"{prefix}:{{{prefix}#{n}}}" for n in range(self.shards)]
        # every script call of one loop turn shares one pipeline (redis_client.ScriptBatch)
        batch = ScriptBatch(self._r)
        self._create = batch.wrap(self._r.register_script(_CREATE))
        self._commit = batch.wrap(self._r.register_script(_COMMIT))
        self._unlock = batch.wrap(self._r.register_script(_UNLOCK))
        self._lock_get = batch.wrap(self._r.register_script(_LOCK_GET))
        self._delete = batch.wrap(self._r.register_script(_DELETE))
        self._take = batch.wrap(self._r.register_script(_TAKE))

    def _base(self, session_id: str) -> str:
        if self.shards == 1:
            return self._bases[0]
        return self._bases[zlib.crc32(session_id.encode()) % self.shards]

    def _k(self, session_id: str) -> str:
        return f"{self._base(session_id)}:s:{session_id}"

    def _lk(self, session_id: str) -> str:
        return f"{self._base(session_id)}:lock:{session_id}"

    def _live_key(self, session_id: str) -> str:
        return f"{self._base(session_id)}:live"

    async def _call(self, coro):
        return await call(coro, component="store")

    async def create(self, data: dict[str, Any]) -> str:
        ttl_ms = int(self.ttl_s * 1000)
        raw = jsonutil.dumps(data)
        for _ in range(1 if self.shards == 1 else 4):
            sid = new_session_id()
            ok = await self._call(
                self._create(
                    keys=[self._live_key(sid), self._k(sid)],
                    args=[int(time.time() * 1000), self._shard_capacity, ttl_ms, sid, raw],
                )
            )
            if ok:
                return sid
        raise CapacityError(f"session store is full ({self.capacity} live sessions)", component="store")

    async def get(self, session_id: str) -> dict[str, Any]:
        ttl_ms = int(self.ttl_s * 1000)
        raw = await self._call(self._r.getex(self._k(session_id), px=ttl_ms))
        if raw is None:
            raise _not_found(session_id)
        return jsonutil.loads(raw)

    async def _acquire(self, session_id: str) -> tuple[str, bytes]:
        """Take the session's update lock; return the lock token and the session's stored value."""
        token = secrets.token_hex(8)
        deadline = time.monotonic() + self.lock_wait_s
        delay = 0.001
        keys = [self._k(session_id), self._lk(session_id)]
        args = [token, int(self.lock_lease_s * 1000)]
        while True:
            got = await self._call(self._lock_get(keys=keys, args=args))
            if got[0] == -1:
                raise _not_found(session_id)
            if got[0] == 1:
                return token, got[1]
            if time.monotonic() > deadline:
                raise CapacityError(
                    f"session {session_id[:8]}... is busy (lock held > {self.lock_wait_s:g}s)", component="store"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    async def update(self, session_id: str, fn: Mutator) -> Any:
        token, raw = await self._acquire(session_id)
        try:
            work = jsonutil.loads(raw)
            result = await _apply(fn, work)
        except BaseException:
            await self._call(self._unlock(keys=[self._lk(session_id)], args=[token]))
            raise
        status = await self._call(
            self._commit(
                keys=[self._k(session_id), self._lk(session_id), self._live_key(session_id)],
                args=[token, jsonutil.dumps(work), int(self.ttl_s * 1000), int(time.time() * 1000), session_id],
            )
        )
        if status == 0:
            raise _not_found(session_id)
        if status == -1:
            raise CapacityError(
                f"session {session_id[:8]}... update outlived its lock lease "
                f"({self.lock_lease_s:g}s); the change was dropped",
                component="store",
            )
        return result

    async def delete(self, session_id: str) -> bool:
        n = await self._call(self._delete(keys=[self._k(session_id), self._live_key(session_id)], args=[session_id]))
        return bool(n)

    async def take(self, session_id: str) -> dict[str, Any]:
        raw = await self._call(self._take(keys=[self._k(session_id), self._live_key(session_id)], args=[session_id]))
        if raw is None:
            raise _not_found(session_id)
        return jsonutil.loads(raw)

    async def count(self) -> int:
        now = int(time.time() * 1000)
        async with self._r.pipeline(transaction=False) as pipe:
            for base in self._bases:
                pipe.zremrangebyscore(f"{base}:live", "-inf", now)
                pipe.zcard(f"{base}:live")
            got = await self._call(pipe.execute())
        return sum(int(n) for n in got[1::2])

    async def close(self) -> None:
        await self._r.aclose()

    async def clear(self) -> None:
        """Remove every key under this store's prefix (tests and `rollgate` maintenance)."""
        async for key in self._r.scan_iter(match=f"{self.prefix}:*", count=500):
            await self._r.delete(key)
