"""The Redis session store under a burst: more concurrent calls than pool connections, and the
single-round-trip lock-and-read / delete scripts (real Redis)."""

from __future__ import annotations

import asyncio

import pytest

from rollgate.core.errors import NotFound
from rollgate.core.session_store import RedisSessionStore


@pytest.fixture
async def store(redis_url, redis_prefix):
    s = RedisSessionStore(redis_url, prefix=redis_prefix, max_connections=8)
    yield s
    await s.clear()
    await s.close()


async def test_burst_beyond_the_pool_waits_instead_of_failing(store):
    sids = [await store.create({"n": 0}) for _ in range(50)]

    def bump(record):
        record["n"] += 1
        return record["n"]

    # 500 concurrent read-modify-writes over 8 connections: none may fail or be lost.
    results = await asyncio.gather(*(store.update(sid, bump) for sid in sids for _ in range(10)))
    assert sorted(results) == sorted(list(range(1, 11)) * 50)
    assert [(await store.get(sid))["n"] for sid in sids] == [10] * 50


async def test_update_of_a_missing_session_takes_no_lock(store, redis_url):
    with pytest.raises(NotFound):
        await store.update("no-such-session", lambda r: None)
    keys = [k async for k in store._r.scan_iter(match=f"{store.prefix}:*:lock:*")]
    assert keys == []


async def test_failed_mutator_releases_the_lock_and_keeps_the_value(store):
    sid = await store.create({"n": 1})

    def boom(record):
        record["n"] = 99
        raise ValueError("tool crashed")

    with pytest.raises(ValueError):
        await store.update(sid, boom)
    assert (await store.get(sid)) == {"n": 1}
    assert await store.update(sid, lambda r: r.__setitem__("n", 2)) is None  # the lock was released
    assert (await store.get(sid)) == {"n": 2}


async def test_delete_removes_the_session_and_its_capacity_slot(store):
    sid = await store.create({"n": 1})
    assert await store.count() == 1
    assert await store.delete(sid) is True
    assert await store.delete(sid) is False
    assert await store.count() == 0
    with pytest.raises(NotFound):
        await store.get(sid)
