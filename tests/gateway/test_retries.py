"""Re-running infrastructure failures (a job's `retry_errors`), over both job queues, with the real
Agent, a real environment runtime whose seeding fails on purpose, and the scripted model."""

from __future__ import annotations

import random
import time

import pytest
from pydantic import ValidationError

from rollgate.agent_server.agent import Agent
from rollgate.core.errors import UpstreamError
from rollgate.core.schemas import Trajectory
from rollgate.core.session_store import MemorySessionStore
from rollgate.core.settings import GatewaySettings, Settings
from rollgate.jobs.plan import RolloutRequest, plan_job
from rollgate.jobs.queue import JobSpec, TaskEnvelope
from rollgate.jobs.worker import Worker
from rollgate.model_server.client import LocalModelClient
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.client import LocalEnvClient
from rollgate.resources_servers.envs.math_env import MathEnv
from tests.gateway.rows import example_rows
from tests.gateway.test_worker import records, wait_for


class FlakyMathEnv(MathEnv):
    """Math whose seeding fails (as an unreachable dependency would) for the first `fail_first`
    seeds of every task: the episode ends env_error, and a fresh episode may succeed."""

    name = "flaky"

    def __init__(self, fail_first: int):
        self.fail_first = fail_first
        self.seeds: dict[str, int] = {}

    def seed(self, task, rng):
        n = self.seeds[task.task_id] = self.seeds.get(task.task_id, 0) + 1
        if n <= self.fail_first:
            raise UpstreamError(f"sandbox unavailable (seed {n})", component="env", transient=True)
        return super().seed(task, rng)


def make_agent(env: MathEnv) -> Agent:
    from rollgate.model_server.server import build_service

    settings = Settings(model={"backend": "scripted"})
    return Agent(
        LocalModelClient(build_service(settings)),
        {env.name: LocalEnvClient(EnvRuntime(env, MemorySessionStore()))},
        settings.agent,
        model_name=settings.model.served_name,
    )


async def submit(q, n: int, retry_errors: int) -> str:
    job_id = f"job_{random.getrandbits(40):x}"
    rows = [dict(r, task_id=f"r{i}", env="flaky") for i, r in enumerate(example_rows("math", n))]
    tasks = [
        TaskEnvelope(
            job_id=job_id,
            key=f"{i}.0",
            index=i,
            group_id=f"g{i}",
            task_id=r["task_id"],
            row=r,
            env="flaky",
            retry_errors=retry_errors,
        )
        for i, r in enumerate(rows)
    ]
    spec = JobSpec(job_id=job_id, num_tasks=n, num_rows=n, model="scripted", retry_errors=retry_errors)
    await q.submit(spec, tasks)
    return job_id


async def run_job(q, env: MathEnv, n: int, retry_errors: int) -> list[Trajectory]:
    worker = Worker(q, make_agent(env), concurrency=4, block_s=0.1, retry_backoff_s=0.01)
    job_id = await submit(q, n, retry_errors)
    worker.start()
    try:
        await wait_for(lambda: _finished(q, job_id))
    finally:
        await worker.stop()
    return [Trajectory.model_validate(r) for r in await records(q, job_id)]


async def _finished(q, job_id: str) -> bool:
    return (await q.progress(job_id)).finished


async def test_failed_episodes_are_rerun_and_yield_one_record_with_their_attempts(make_queue):
    env = FlakyMathEnv(fail_first=2)
    trajs = await run_job(make_queue(), env, 4, retry_errors=2)
    assert sorted(t.task.task_id for t in trajs) == ["r0", "r1", "r2", "r3"]  # exactly one record each
    for t in trajs:
        assert t.outcome.value == "completed" and t.attempts == 3, (t.outcome, t.error)
        errors = t.metrics["attempt_errors"]
        assert [e["attempt"] for e in errors] == [1, 2]
        assert {e["outcome"] for e in errors} == {"env_error"}
        assert "sandbox unavailable" in errors[0]["message"]
    assert env.seeds == {f"r{i}": 3 for i in range(4)}  # every attempt seeded a fresh session


async def test_retries_stop_after_retry_errors_and_keep_the_last_failure(make_queue):
    env = FlakyMathEnv(fail_first=100)
    [t] = await run_job(make_queue(), env, 1, retry_errors=2)
    assert t.outcome.value == "env_error" and t.reward is None and t.attempts == 3
    assert len(t.metrics["attempt_errors"]) == 2
    assert env.seeds == {"r0": 3}


async def test_without_retry_errors_a_failure_is_recorded_at_once(make_queue):
    env = FlakyMathEnv(fail_first=1)
    [t] = await run_job(make_queue(), env, 1, retry_errors=0)
    assert t.outcome.value == "env_error" and t.attempts == 1 and "attempt_errors" not in t.metrics
    assert env.seeds == {"r0": 1}


async def test_completed_episodes_are_never_rerun(make_queue):
    env = FlakyMathEnv(fail_first=0)
    trajs = await run_job(make_queue(), env, 3, retry_errors=3)
    assert {t.outcome.value for t in trajs} <= {"completed", "truncated"}
    assert all(t.attempts == 1 for t in trajs)
    assert env.seeds == {"r0": 1, "r1": 1, "r2": 1}


async def test_cancelling_a_job_stops_its_retries(make_queue):
    q = make_queue(visibility_timeout_s=0.6)  # heartbeats (which notice the cancel) every 0.2 s
    env = FlakyMathEnv(fail_first=100)
    worker = Worker(q, make_agent(env), concurrency=2, block_s=0.1, retry_backoff_s=30.0)
    job_id = await submit(q, 1, retry_errors=5)
    worker.start()
    try:
        await wait_for(lambda: _seeded(env))
        started = time.monotonic()
        await q.cancel(job_id)
        await wait_for(lambda: _idle(worker), timeout_s=5)
        assert time.monotonic() - started < 5  # not the 30 s backoff
    finally:
        await worker.stop()
    [rec] = await records(q, job_id)
    assert rec["outcome"] == "cancelled"
    assert env.seeds == {"r0": 1}


async def _seeded(env: FlakyMathEnv) -> bool:
    return bool(env.seeds)


async def _idle(worker: Worker) -> bool:
    return worker.in_flight == 0


def test_retry_errors_comes_from_the_job_or_the_gateway_default():
    row = example_rows("math", 1)[0]
    spec, tasks = plan_job(RolloutRequest(tasks=[row], env="math"), known_envs=["math"], model_name="m", retry_errors=2)
    assert spec.retry_errors == 2 and tasks[0].retry_errors == 2
    req = RolloutRequest(tasks=[row], env="math", retry_errors=0, priority=3)
    spec, tasks = plan_job(req, known_envs=["math"], model_name="m", retry_errors=2)
    assert spec.retry_errors == 0 and tasks[0].retry_errors == 0 and spec.priority == 3


@pytest.mark.parametrize("field,value", [("retry_errors", -1), ("retry_errors", 11), ("priority", 0)])
def test_bad_retry_errors_or_priority_is_refused_naming_the_field(field, value):
    with pytest.raises(ValidationError) as err:
        RolloutRequest.model_validate({"tasks": [{}], field: value})
    assert err.value.errors()[0]["loc"] == (field,)


def test_the_gateway_default_is_no_retries_and_is_validated():
    assert GatewaySettings().retry_errors == 0
    with pytest.raises(ValidationError):
        GatewaySettings(retry_errors=-1)
