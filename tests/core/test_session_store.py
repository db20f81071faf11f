"""One contract suite, run against both session stores (Redis: the real server)."""

from __future__ import annotations

import asyncio

import pytest

from rollgate.core.errors import CapacityError, NotFound
from rollgate.core.session_store import MemorySessionStore, RedisSessionStore


@pytest.fixture(params=["memory", "redis"])
async def make_store(request):
    made = []

    def factory(**kw):
        if request.param == "memory":
            store = MemorySessionStore(**kw)
        else:
            url = request.getfixturevalue("redis_url")
            store = RedisSessionStore(url, prefix=request.getfixturevalue("redis_prefix"), **kw)
        made.append(store)
        return store

    yield factory
    for store in made:
        if isinstance(store, RedisSessionStore):
            await store.clear()
        await store.close()


async def test_created_session_reads_back(make_store):
    store = make_store()
    sid = await store.create({"state": {"n": 1}})
    assert (await store.get(sid)) == {"state": {"n": 1}}
    assert len(sid) >= 32


async def test_ids_are_unique_and_unguessable(make_store):
    store = make_store()
    ids = {await store.create({}) for _ in range(50)}
    assert len(ids) == 50
    with pytest.raises(NotFound):
        await store.get(sorted(ids)[0][:-1] + ("A" if sorted(ids)[0][-1] != "A" else "B"))


async def test_update_is_atomic_under_concurrency(make_store):
    store = make_store()
    sid = await store.create({"n": 0})

    async def slow_inc(d):
        v = d["n"]
        await asyncio.sleep(0.001)  # widen the race window
        d["n"] = v + 1
        return d["n"]

    results = await asyncio.gather(*(store.update(sid, slow_inc) for _ in range(30)))
    assert sorted(results) == list(range(1, 31))
    assert (await store.get(sid))["n"] == 30


async def test_sync_mutator_result_and_state(make_store):
    store = make_store()
    sid = await store.create({"items": []})

    def add(d):
        d["items"].append(len(d["items"]))
        return "added"

    assert await store.update(sid, add) == "added"
    assert await store.update(sid, add) == "added"
    assert (await store.get(sid))["items"] == [0, 1]


async def test_failed_mutator_changes_nothing(make_store):
    store = make_store()
    sid = await store.create({"n": 1})

    def boom(d):
        d["n"] = 99
        raise RuntimeError("tool crashed")

    with pytest.raises(RuntimeError):
        await store.update(sid, boom)
    assert (await store.get(sid))["n"] == 1
    # and the session is not left locked
    assert await store.update(sid, lambda d: d["n"]) == 1


async def test_sessions_expire_by_ttl(make_store):
    store = make_store(ttl_s=0.3)
    sid = await store.create({"x": 1})
    await asyncio.sleep(0.15)
    await store.get(sid)  # a touch renews the lease
    await asyncio.sleep(0.2)
    assert (await store.get(sid))["x"] == 1
    await asyncio.sleep(0.45)
    with pytest.raises(NotFound):
        await store.get(sid)
    with pytest.raises(NotFound):
        await store.update(sid, lambda d: None)


async def test_capacity_limit_answers_clear_error(make_store):
    store = make_store(capacity=3)
    ids = [await store.create({}) for _ in range(3)]
    with pytest.raises(CapacityError, match="full"):
        await store.create({})
    assert await store.delete(ids[0])
    await store.create({})  # room again
    assert await store.count() == 3


async def test_expired_sessions_free_capacity(make_store):
    store = make_store(capacity=2, ttl_s=0.2)
    await store.create({})
    await store.create({})
    await asyncio.sleep(0.35)
    await store.create({})


async def test_delete_is_explicit_and_final(make_store):
    store = make_store()
    sid = await store.create({"x": 1})
    other = await store.create({"x": 2})
    assert await store.delete(sid) is True
    assert await store.delete(sid) is False
    with pytest.raises(NotFound):
        await store.get(sid)
    assert (await store.get(other))["x"] == 2


async def test_stored_state_is_a_copy(make_store):
    store = make_store()
    data = {"list": [1]}
    sid = await store.create(data)
    data["list"].append(2)
    got = await store.get(sid)
    got["list"].append(3)
    assert (await store.get(sid))["list"] == [1]


async def test_take_reads_and_deletes_in_one_step_and_frees_capacity(make_store):
    store = make_store(capacity=1)
    sid = await store.create({"state": {"n": 1}})
    assert await store.take(sid) == {"state": {"n": 1}}
    with pytest.raises(NotFound):
        await store.take(sid)
    with pytest.raises(NotFound):
        await store.get(sid)
    await store.create({"state": {}})  # the one slot is free again
