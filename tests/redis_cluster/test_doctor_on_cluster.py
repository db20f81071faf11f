"""`rollgate doctor` reads a redis+cluster:// URL: the tier's cluster keeps no append-only file,
which the check names; a cluster none of whose nodes answers is a failed check, not a crash."""

from __future__ import annotations

from rollgate.commands.checks import Status, check_redis
from rollgate.core.redis_cluster_procs import free_cluster_ports


async def test_doctor_checks_a_redis_cluster_url(cluster_url):
    result = await check_redis(cluster_url, 5.0)
    assert result.status is Status.warn and "no persistence" in result.detail, result


async def test_doctor_fails_clearly_when_no_cluster_node_answers():
    port = free_cluster_ports(1)[0]
    result = await check_redis(f"redis+cluster://127.0.0.1:{port}", 2.0)
    assert result.status is Status.fail and "cannot reach" in result.detail, result
