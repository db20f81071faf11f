"""Fixtures of the gateway tests."""

from __future__ import annotations

import pytest

from rollgate.jobs.memory import MemoryJobQueue


@pytest.fixture(params=["memory", "redis"])
async def make_queue(request):
    """A factory of job queues, run once per implementation (Redis: the real server, a key
    prefix unique to the test); every queue made is cleared and closed afterwards."""
    made = []

    def factory(**kw):
        if request.param == "memory":
            q = MemoryJobQueue(**kw)
        else:
            from rollgate.jobs.redis import RedisJobQueue

            q = RedisJobQueue(
                request.getfixturevalue("redis_url"), prefix=request.getfixturevalue("redis_prefix"), **kw
            )
        made.append(q)
        return q

    yield factory
    for q in made:
        if hasattr(q, "clear"):
            await q.clear()
        await q.close()
