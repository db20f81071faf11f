"""Serve a gateway app over real HTTP on loopback inside the test's own event loop, so a queue
made by the `make_queue` fixture (memory or the real Redis) is used by the server, the test
acting as the worker, and the fixture's cleanup all in one loop. `work` is that worker: it
completes claimed tasks with real Trajectory records whose rewards the test chooses."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import uvicorn

from rollgate.core.metrics import Metrics
from rollgate.core.schemas import ErrorInfo, ErrorKind, FailureRecord, Outcome, PolicyRef, TaskRef, Trajectory, Turn
from rollgate.core.settings import Settings
from rollgate.gateway.server import create_gateway_app


@contextlib.asynccontextmanager
async def serve_here(app) -> AsyncIterator[str]:
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]  # pytest owns signals
    task = asyncio.create_task(server.serve())
    for _ in range(2000):
        if server.started or task.done():
            break
        await asyncio.sleep(0.005)
    if not server.started:
        task.result() if task.done() else task.cancel()
        raise RuntimeError("the gateway did not start")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


def gateway_app(queue, envs=("math", "workplace")):
    settings = Settings(gateway={"ui": True})
    return create_gateway_app(
        settings, queue, known_envs=lambda: list(envs), routers=[], metrics=Metrics(), api_key=None
    )


@contextlib.asynccontextmanager
async def gateway_client(queue, envs=("math", "workplace")) -> AsyncIterator[httpx.AsyncClient]:
    async with serve_here(gateway_app(queue, envs)) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield client


# In `work`'s rewards: a task that never became an episode (a FailureRecord, as a worker writes
# for a task every worker died on), unlike None, an episode that ended in model_error.
NO_EPISODE = "no-episode"


def record(task, reward: float | str | None, *, answer: str | None = None) -> dict:
    if reward == NO_EPISODE:
        return FailureRecord(
            task_id=task.task_id,
            row_index=task.index,
            job_id=task.job_id,
            error=ErrorInfo(kind=ErrorKind.internal, component="agent", message="every worker died on it"),
        ).model_dump(mode="json", exclude_none=True)
    t = Trajectory(
        group_id=task.group_id,
        sample_index=task.sample_index,
        row_index=task.index,
        job_id=task.job_id,
        task=TaskRef(env=task.env, task_id=task.task_id, row=task.row),
        policy=PolicyRef(model="rollgate-tiny", policy_version=task.policy_version),
        turns=[Turn(prompt_token_ids=[1], generation_token_ids=[2], generation_log_probs=[-0.1], weight_version="w7")],
        outcome=Outcome.completed if reward is not None else Outcome.model_error,
        reward=reward,
        metrics={"answer": answer} if answer is not None else {},
        error=None if reward is not None else ErrorInfo(kind=ErrorKind.upstream, component="model", message="502"),
    )
    return t.model_dump(mode="json")


async def work(queue, rewards: dict[int, list], answers: dict[int, list[str]] | None = None) -> int:
    """Complete every claimable task: row i's sample s gets rewards[i][s]."""
    done = 0
    while claims := await queue.claim("test-worker", 100, block_s=0.2):
        for c in claims:
            reward = rewards[c.task.index][c.task.sample_index]
            answer = (answers or {}).get(c.task.index, [None] * 64)[c.task.sample_index]
            assert await queue.complete(c, record(c.task, reward, answer=answer))
            done += 1
    return done
