"""The parts every benchmark runs and the driver that runs many episodes at a fixed concurrency.

The parts are the real ones: the model service with its scripted backend (an instant,
deterministic policy: a calculator call, then `Answer: 42`) and the shipped `math` environment
(its calculator tool, its sympy-backed verifier)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from benchmarks import standins
from rollgate.agent_server.agent import Agent, RunContext
from rollgate.core.metrics import Metrics
from rollgate.core.rows import parse_row
from rollgate.core.schemas import Trajectory
from rollgate.core.session_store import MemorySessionStore
from rollgate.core.settings import AgentSettings
from rollgate.model_server.client import HttpModelClient, LocalModelClient
from rollgate.model_server.server import build_service
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.client import HttpEnvClient, LocalEnvClient
from rollgate.resources_servers.registry import load_env

ENV = "math"


SCRIPT = [{"call": {"name": "calculator", "arguments": {"expression": "6*7"}}}, {"text": "Answer: 42"}]


def task_row(i: int, tool_calls: int = 1, delay_s: float = 0.0) -> dict[str, Any]:
    """A math task whose scripted policy calls the calculator `tool_calls` times, then answers;
    with `delay_s`, the scripted model takes that long per turn (a real model's latency)."""
    script = [SCRIPT[0]] * tool_calls + [SCRIPT[1]]
    if delay_s > 0:
        script = [{**turn, "delay_s": delay_s} for turn in script]
    return {
        "responses_create_params": {
            "input": f"What is 6*7? (task {i})",
            "metadata": {"rollgate_script": json.dumps(script)},
        },
        "expected_answer": "42",
        "env": ENV,
        "task_id": f"t{i}",
    }


def model_service(delay_s: float = 0.0) -> Any:
    service = build_service(standins.scripted_settings())
    return standins.DelayedService(service, delay_s) if delay_s > 0 else service


def agent_settings(**overrides: Any) -> AgentSettings:
    return AgentSettings(**{"max_turns": 64, "max_output_tokens": 1_000_000, **overrides})


def embedded_agent(
    *, delay_s: float = 0.0, metrics: Metrics | None = None, settings: AgentSettings | None = None
) -> Agent:
    """The embedded shape: the model service and the math environment in this process."""
    runtime = EnvRuntime(load_env(ENV), MemorySessionStore(capacity=1_000_000))
    return Agent(
        LocalModelClient(model_service(delay_s)),
        {ENV: LocalEnvClient(runtime)},
        settings or agent_settings(),
        model_name="scripted",
        metrics=metrics,
    )


def http_agent(
    model_url: str,
    env_url: str,
    *,
    api_key: str | None = None,
    settings: AgentSettings | None = None,
    channel: bool = True,
) -> Agent:
    """An agent in this process calling a model server and a resources server over the network:
    the multiplexed channel as the agent role uses it (core/channel.py), or plain HTTP."""
    headers = {"authorization": f"Bearer {api_key}"} if api_key else None
    return Agent(
        HttpModelClient(model_url, api_key=api_key, channel=channel),
        {ENV: HttpEnvClient(ENV, env_url, headers=headers, channel=channel)},
        settings or agent_settings(),
        model_name="scripted",
    )


async def close_agent(agent: Agent) -> None:
    await agent.model.aclose()
    for env in agent.envs.values():
        if hasattr(env, "aclose"):
            await env.aclose()


@dataclass
class RunResult:
    trajectories: list[Trajectory]
    wall_s: float
    latencies_s: list[float]


async def drive(agent: Agent, rows: Iterator[dict[str, Any]], concurrency: int) -> RunResult:
    """Run every row through `agent` with at most `concurrency` episodes in flight."""
    out: list[Trajectory] = []
    lat: list[float] = []

    async def worker() -> None:
        for row in rows:  # a shared iterator: each worker takes the next row
            t = time.perf_counter()
            traj = await agent.run(parse_row(row, known_envs=agent.envs), RunContext())  # the edge parses
            lat.append(time.perf_counter() - t)
            out.append(traj)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return RunResult(out, time.perf_counter() - t0, lat)
