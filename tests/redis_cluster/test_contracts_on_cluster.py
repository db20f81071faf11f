"""The job queue's and the session store's contract suites, run again on a Redis Cluster: the
same tests as on one Redis server (tests/gateway/test_queue_contract.py,
tests/core/test_session_store.py), with the fixtures below handing them cluster-backed stores."""

from __future__ import annotations

import pytest

from rollgate.core.session_store import RedisSessionStore
from rollgate.jobs.redis import RedisJobQueue
from tests.core.test_session_store import *  # noqa: F403 - the suite, collected here again
from tests.gateway.test_queue_contract import *  # noqa: F403


@pytest.fixture
async def make_queue(cluster_url, cluster_prefix):
    made: list[RedisJobQueue] = []

    def factory(**kw):
        made.append(RedisJobQueue(cluster_url, prefix=cluster_prefix, **kw))
        return made[-1]

    yield factory
    for q in made:
        await q.clear()
        await q.close()


@pytest.fixture
async def make_store(cluster_url, cluster_prefix):
    made: list[RedisSessionStore] = []

    def factory(**kw):
        made.append(RedisSessionStore(cluster_url, prefix=cluster_prefix, **kw))
        return made[-1]

    yield factory
    for s in made:
        await s.clear()
        await s.close()


@pytest.fixture
def redis_url(cluster_url) -> str:  # the Redis-only tests of the suites take this
    return cluster_url


@pytest.fixture
def redis_prefix(cluster_prefix) -> str:
    return cluster_prefix
