"""Agent workers over both job queues with the real Agent, real environment runtimes and the
scripted model backend (the machinery is under test, not the model)."""

from __future__ import annotations

import asyncio
import inspect
import random
import time

from rollgate.agent_server.agent import Agent
from rollgate.core import jsonutil
from rollgate.core.schemas import FailureRecord, Trajectory, VerifyRequest, VerifyResult
from rollgate.core.session_store import MemorySessionStore
from rollgate.core.settings import Settings
from rollgate.jobs.queue import JobSpec, TaskEnvelope, decode_record
from rollgate.jobs.worker import Worker
from rollgate.model_server.client import LocalModelClient
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.client import LocalEnvClient
from rollgate.resources_servers.envs.math_env import MathEnv
from tests.gateway.rows import example_rows


class SlowMathEnv(MathEnv):
    """Math whose verification takes `delay` seconds (asynchronously): a deliberately slow
    environment, so episodes are still running when a test stops a worker or cancels a job."""

    name = "slowmath"

    def __init__(self, delay: float):
        self.delay = delay

    async def verify(self, state, request: VerifyRequest) -> VerifyResult:
        await asyncio.sleep(self.delay)
        result = super().verify(state, request)
        return await result if inspect.isawaitable(result) else result


def make_agent(verify_delay: float = 0.0) -> Agent:
    from rollgate.model_server.server import build_service

    settings = Settings(model={"backend": "scripted"})
    envs = {
        "math": EnvRuntime(MathEnv(), MemorySessionStore()),
        "slowmath": EnvRuntime(SlowMathEnv(verify_delay), MemorySessionStore()),
    }
    return Agent(
        LocalModelClient(build_service(settings)),
        {n: LocalEnvClient(rt) for n, rt in envs.items()},
        settings.agent,
        model_name=settings.model.served_name,
    )


async def submit(q, env: str, n: int, job_id: str | None = None) -> str:
    job_id = job_id or f"job_{random.getrandbits(40):x}"
    rows = [dict(r, task_id=f"w{i}", env=env) for i, r in enumerate(example_rows("math", n))]
    tasks = [
        TaskEnvelope(
            job_id=job_id,
            key=f"{i}.0",
            index=i,
            group_id=f"g{i}",
            task_id=r["task_id"],
            row=r,
            env=env,
            policy_version="pv",
        )
        for i, r in enumerate(rows)
    ]
    await q.submit(JobSpec(job_id=job_id, num_tasks=n, num_rows=n, model="scripted"), tasks)
    return job_id


async def records(q, job_id: str) -> list[dict]:
    return [jsonutil.loads(decode_record(s)[1]) for s in await q.results(job_id, 0, 10_000)]


async def wait_for(cond, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_worker_runs_every_task_with_bounded_concurrency(make_queue):
    q = make_queue()
    worker = Worker(q, make_agent(verify_delay=0.05), concurrency=3, block_s=0.2)
    job_id = await submit(q, "slowmath", 10)
    peak = 0
    worker.start()

    async def done() -> bool:
        nonlocal peak
        peak = max(peak, worker.in_flight)
        return (await q.progress(job_id)).finished

    await wait_for(done)
    await worker.stop()
    recs = await records(q, job_id)
    trajs = [Trajectory.model_validate(r) for r in recs]
    assert sorted(t.task.task_id for t in trajs) == sorted(f"w{i}" for i in range(10))
    assert all(t.job_id == job_id and t.policy.policy_version == "pv" for t in trajs)
    assert {t.outcome.value for t in trajs} == {"completed"}, [t.error for t in trajs]
    assert 1 <= peak <= 3


async def test_a_row_the_agent_refuses_becomes_one_failure_record(make_queue):
    q = make_queue()
    worker = Worker(q, make_agent(), concurrency=2, block_s=0.2)
    job_id = await submit(q, "no-such-env", 1)
    worker.start()
    await wait_for(lambda: _finished(q, job_id))
    await worker.stop()
    [rec] = await records(q, job_id)
    failure = FailureRecord.model_validate(rec)
    assert failure.error.field == "env" and failure.row_index == 0 and failure.job_id == job_id


async def _finished(q, job_id: str) -> bool:
    return (await q.progress(job_id)).finished


async def test_stopping_worker_hands_running_tasks_to_another_at_once(make_queue):
    q = make_queue(visibility_timeout_s=60)  # far longer than the test: only release can explain a takeover
    slow = Worker(q, make_agent(verify_delay=30), concurrency=2, block_s=0.2, name="slow")
    job_id = await submit(q, "slowmath", 2)
    slow.start()

    async def both_running() -> bool:
        return slow.in_flight == 2

    await wait_for(both_running)
    await slow.stop(drain_timeout_s=0.1)
    fast = Worker(q, make_agent(verify_delay=0), concurrency=2, block_s=0.2, name="fast")
    started = time.monotonic()
    fast.start()
    await wait_for(lambda: _finished(q, job_id), timeout_s=20)
    await fast.stop()
    assert time.monotonic() - started < 20
    recs = await records(q, job_id)
    assert len(recs) == 2 and {r["outcome"] for r in recs} <= {"completed", "truncated"}


async def test_cancelling_a_job_stops_its_running_episodes(make_queue):
    q = make_queue(visibility_timeout_s=0.9)  # heartbeat (and the cancel check) every 0.3 s
    agent = make_agent(verify_delay=30)
    outcomes: list[str] = []  # what the episodes themselves ended with (the queue's own records aside)

    class Watched:
        async def run(self, task, ctx=None):
            traj = await agent.run(task, ctx)
            outcomes.append(traj.outcome.value)
            return traj

    worker = Worker(q, Watched(), concurrency=2, block_s=0.2)
    job_id = await submit(q, "slowmath", 2)
    worker.start()

    async def both_running() -> bool:
        return worker.in_flight == 2

    await wait_for(both_running)
    started = time.monotonic()
    progress = await q.cancel(job_id)
    assert progress.counts == {"cancelled": 2}

    async def idle() -> bool:
        return worker.in_flight == 0

    await wait_for(idle, timeout_s=10)
    assert time.monotonic() - started < 5  # not the 30 s the episodes would have taken
    await worker.stop()
    recs = await records(q, job_id)
    assert [r["outcome"] for r in recs] == ["cancelled", "cancelled"]  # written by the queue's cancel
    assert outcomes == ["cancelled", "cancelled"]  # the worker told the running episodes to stop


async def test_a_cancel_reaches_running_episodes_within_a_second_at_the_default_timeout(make_queue):
    """The claims' heartbeat runs every 20 s at the default 60 s visibility timeout; the cancel
    check must not wait for it (a harness ran on for 9.5 s after its job was cancelled)."""
    q = make_queue()  # the default visibility timeout
    agent = make_agent(verify_delay=30)
    worker = Worker(q, agent, concurrency=1, block_s=0.2)
    job_id = await submit(q, "slowmath", 1)
    worker.start()

    async def running() -> bool:
        return worker.in_flight == 1

    await wait_for(running)
    started = time.monotonic()
    await q.cancel(job_id)

    async def idle() -> bool:
        return worker.in_flight == 0

    await wait_for(idle, timeout_s=10)
    assert time.monotonic() - started < 1.5
    await worker.stop()


async def test_tasks_of_a_dead_worker_are_reclaimed_and_counted(make_queue):
    from rollgate.core.metrics import Metrics

    q = make_queue(visibility_timeout_s=0.3)
    job_id = await submit(q, "math", 3)
    abandoned = await q.claim("dead-worker", 3, block_s=0.2)  # claimed, never acked: the worker "died"
    assert len(abandoned) == 3
    metrics = Metrics()
    worker = Worker(q, make_agent(), concurrency=3, block_s=0.2, name="alive", metrics=metrics)
    worker.start()
    await wait_for(lambda: _finished(q, job_id))
    await worker.stop()
    assert len(await records(q, job_id)) == 3
    assert metrics.registry.get_sample_value("rollgate_queue_reclaims_total") == 3
