"""The Redis Cluster tier (pytest -m redis_cluster): a cluster of the tier's own on loopback
ports (three primaries, three replicas, a one-second node timeout so a failover takes about two
seconds), started once for the tier and stopped, every server by its pid, at the end."""

from __future__ import annotations

import shutil
import uuid

import pytest

from rollgate.core.redis_cluster_procs import RedisClusterProcesses


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/redis_cluster/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.redis_cluster)


@pytest.fixture(scope="session")
def redis_cluster():
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("redis-server and redis-cli are needed to start a Redis Cluster")
    cluster = RedisClusterProcesses(node_timeout_ms=1000).start()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def cluster_url(redis_cluster) -> str:
    redis_cluster.wait_ok()  # a test that killed a primary leaves a promoted replica: still ok
    return redis_cluster.url


@pytest.fixture
def cluster_prefix() -> str:
    return f"rgcl:{uuid.uuid4().hex[:12]}"
