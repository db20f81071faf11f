"""A rollout job on a Redis Cluster through the real worker and agent (scripted model, the math
environment with its sessions in the cluster too), with the primary that holds the job's slot
SIGKILLed mid-job: its replica is promoted, and the job still ends with exactly one record per
task, without hanging."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from rollgate.agent_server.agent import Agent
from rollgate.core.schemas import Trajectory
from rollgate.core.session_store import RedisSessionStore
from rollgate.core.settings import Settings
from rollgate.jobs.queue import JobSpec, TaskEnvelope
from rollgate.jobs.redis import RedisJobQueue
from rollgate.jobs.worker import Worker
from rollgate.model_server.client import LocalModelClient
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.client import LocalEnvClient
from tests.gateway.rows import example_rows
from tests.gateway.test_worker import SlowMathEnv, records


async def submit(q: RedisJobQueue, env: str, n: int, job_id: str) -> str:
    """`n` tasks cycling over the environment's example rows, one sample each."""
    examples = example_rows("math", 100)
    rows = [dict(examples[i % len(examples)], task_id=f"w{i}", env=env) for i in range(n)]
    tasks = [
        TaskEnvelope(job_id=job_id, key=f"{i}.0", index=i, group_id=f"g{i}", task_id=r["task_id"], row=r, env=env)
        for i, r in enumerate(rows)
    ]
    await q.submit(JobSpec(job_id=job_id, num_tasks=n, num_rows=n, model="scripted"), tasks)
    return job_id


def cluster_agent(url: str, prefix: str, store_capacity: int = 10_000) -> tuple[Agent, RedisSessionStore]:
    from rollgate.model_server.server import build_service

    settings = Settings(model={"backend": "scripted"})
    store = RedisSessionStore(url, prefix=f"{prefix}:env", capacity=store_capacity)
    agent = Agent(
        LocalModelClient(build_service(settings)),
        {"slowmath": LocalEnvClient(EnvRuntime(SlowMathEnv(0.1), store))},
        settings.agent,
        model_name=settings.model.served_name,
    )
    return agent, store


async def test_a_job_survives_its_primary_being_killed_with_one_record_per_task(
    redis_cluster, cluster_url, cluster_prefix
):
    q = RedisJobQueue(cluster_url, prefix=cluster_prefix, visibility_timeout_s=3)
    agent, store = cluster_agent(cluster_url, cluster_prefix)
    workers = [Worker(q, agent, concurrency=8, block_s=0.2, name=f"w{i}") for i in range(2)]
    try:
        n = 150
        job_id = await submit(q, "slowmath", n, "job_failover")
        victim = redis_cluster.primary_of(q._jk(job_id, "stream"))
        for w in workers:
            w.start()
        while (await q.progress(job_id)).done < 20:
            await asyncio.sleep(0.05)
        assert (await q.progress(job_id)).done < n // 2  # the kill lands mid-job
        await asyncio.to_thread(redis_cluster.kill, victim)
        killed_at = time.monotonic()
        state = "running"
        back_after = None
        while state == "running":
            assert time.monotonic() - killed_at < 90, "the job hung after the failover"
            await asyncio.sleep(0.1)
            try:
                prog = await q.progress(job_id)
            except Exception:  # noqa: BLE001 - the slot has no primary until the replica takes over
                continue
            back_after = back_after or time.monotonic() - killed_at
            state = prog.state
        finished_after = time.monotonic() - killed_at
        print(f"\njob's slot served again {back_after:.1f}s after the kill; job done {finished_after:.1f}s after it")
        assert state == "done"
        await asyncio.to_thread(redis_cluster.wait_ok)
        assert victim not in redis_cluster.primaries()  # its replica was promoted
        recs = [Trajectory.model_validate(r) for r in await records(q, job_id)]
        per_task = Counter(t.task.task_id for t in recs)
        assert sorted(per_task) == sorted(f"w{i}" for i in range(n))
        assert set(per_task.values()) == {1}
        outcomes = Counter(t.outcome.value for t in recs)
        # a tool call caught by the failover may end its episode env_error; most complete
        assert outcomes["completed"] >= n * 0.8, outcomes
    finally:
        for w in workers:
            await w.stop(drain_timeout_s=5)
        await q.clear()
        await store.clear()
        await q.close()
        await store.close()


async def test_sessions_and_jobs_spread_over_the_primaries(redis_cluster, cluster_url, cluster_prefix):
    store = RedisSessionStore(cluster_url, prefix=cluster_prefix, capacity=64_000)
    q = RedisJobQueue(cluster_url, prefix=cluster_prefix)
    try:
        assert store.shards > 1
        ids = [await store.create({"i": i}) for i in range(200)]
        assert await store.count() == 200
        assert len({redis_cluster.primary_of(store._k(s)) for s in ids}) == 3
        for i in range(12):
            await submit(q, "math", 1, job_id=f"job_spread{i}")
        assert len({redis_cluster.primary_of(q._jk(f"job_spread{i}", "stream")) for i in range(12)}) >= 2
        assert await q.queued() == 12
    finally:
        await store.clear()
        await q.clear()
        await store.close()
        await q.close()
