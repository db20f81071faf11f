"""The agent loop: every way an episode ends is a typed outcome; infrastructure failures carry
no reward; token data is exact across turns.

The model here is the model server's `scripted` backend (a deterministic policy, instant, with
the tiny model's real tokenizer and template) or a real server on loopback that is dead or slow
on purpose; environments are real (math, the toy counter) over in-process or HTTP clients."""

from __future__ import annotations

import asyncio
import json
import time
from itertools import pairwise

import pytest
from fastapi import FastAPI

from rollgate.agent_server.agent import Agent, RunContext
from rollgate.agent_server.episode import Phase, failure
from rollgate.core.errors import BadRequest
from rollgate.core.http import NO_RETRY
from rollgate.core.metrics import Metrics
from rollgate.core.rows import parse_row
from rollgate.core.schemas import Outcome, Trajectory
from rollgate.core.serving import serve_in_thread
from rollgate.core.session_store import MemorySessionStore
from rollgate.core.settings import AgentSettings, Settings
from rollgate.model_server.client import HttpModelClient, LocalModelClient
from rollgate.model_server.server import build_service
from rollgate.resources_servers.app import create_resources_app
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.client import HttpEnvClient, LocalEnvClient
from rollgate.resources_servers.registry import load_env
from tests.conftest import free_port
from tests.lax_model import LaxModelServer
from tests.resources.toy_env import CounterEnv


def script(*turns) -> str:
    return json.dumps(list(turns))


def call(name: str, **arguments) -> dict:
    return {"call": {"name": name, "arguments": arguments}}


def counter_row(*turns, target: int = 7, **extra) -> dict:
    return {
        "responses_create_params": {
            "input": "count to the target",
            "metadata": {"rollgate_script": script(*turns)},
            **extra,
        },
        "env": "counter",
        "target": target,
    }


@pytest.fixture
def scripted_service(tiny_model_dir):
    settings = Settings(model={"backend": "scripted", "model_path": tiny_model_dir})
    return build_service(settings)


async def run(agent: Agent, row: dict, ctx: RunContext | None = None) -> Trajectory:
    """Rows enter at an edge: parsed once there, then the agent runs the parsed task."""
    return await agent.run(parse_row(row, known_envs=agent.envs), ctx)


def make_agent(model, *, envs=None, metrics=None, **agent_settings) -> Agent:
    envs = envs or {
        "counter": LocalEnvClient(EnvRuntime(CounterEnv(), MemorySessionStore())),
        "math": LocalEnvClient(EnvRuntime(load_env("math"), MemorySessionStore())),
    }
    return Agent(model, envs, AgentSettings(**agent_settings), model_name="rollgate-tiny", metrics=metrics)


async def test_tool_episode_completes_with_exact_token_data(scripted_service):
    metrics = Metrics()
    agent = make_agent(LocalModelClient(scripted_service), metrics=metrics)
    traj = await run(agent, counter_row(call("add", amount=3), call("add", amount=4), {"text": "7"}))
    assert traj.outcome is Outcome.completed
    assert traj.reward == 1.5 and traj.reward_components == {"state": 1.0, "answer": 0.5}
    assert [m.get("type") for m in traj.messages].count("function_call_output") == 2
    assert len(traj.turns) == 3 and traj.metrics["token_drift"] == 0
    for prev, cur in pairwise(traj.turns):
        assert (
            cur.prompt_token_ids[: len(prev.prompt_token_ids) + len(prev.generation_token_ids)]
            == prev.prompt_token_ids + prev.generation_token_ids
        )
    # the readable transcript carries no token ids; the turns do
    assert not any("prompt_token_ids" in m for m in traj.messages)
    Trajectory.model_validate_json(traj.model_dump_json())
    text = metrics.registry.get_sample_value
    assert text("rollgate_rollouts_finished_total", {"env": "counter", "outcome": "completed"}) == 1
    assert text("rollgate_sessions_in_flight", {"env": "counter"}) == 0
    # one observation per hop, labelled by the phase's plain name
    for hop, n in (("seed", 1), ("model", 3), ("tool", 2), ("verify", 1)):
        assert text("rollgate_hop_latency_seconds_count", {"hop": hop, "env": "counter"}) == n
    # the agent's counters on the wire, beside the environment's own keys
    agent_keys = {k: traj.metrics[k] for k in ("turns", "tool_calls", "tool_errors", "token_drift")}
    assert agent_keys == {"turns": 3, "tool_calls": 2, "tool_errors": 0, "token_drift": 0}
    assert traj.metrics["output_tokens"] == sum(len(t.generation_token_ids) for t in traj.turns) > 0
    assert "context_exhausted" not in traj.metrics  # written only when the context ran out


async def test_session_is_closed_after_the_episode(scripted_service):
    runtime = EnvRuntime(CounterEnv(), MemorySessionStore())
    agent = make_agent(LocalModelClient(scripted_service), envs={"counter": LocalEnvClient(runtime)})
    await run(agent, counter_row(call("add", amount=1), {"text": "1"}))
    assert await runtime.store.count() == 0


async def test_invented_tool_is_an_error_output_and_the_episode_goes_on(scripted_service):
    agent = make_agent(LocalModelClient(LaxModelServer(scripted_service, ["teleport"])))
    traj = await run(agent, counter_row(call("teleport", to=7), call("reset", mode="target"), {"text": "7"}))
    outputs = [m["output"] for m in traj.messages if m.get("type") == "function_call_output"]
    assert outputs[0].startswith("error: unknown tool 'teleport'")
    assert traj.outcome is Outcome.completed and traj.reward == 1.5
    assert traj.metrics["tool_errors"] == 1


async def test_turn_budget_truncates_and_still_verifies(scripted_service):
    agent = make_agent(LocalModelClient(scripted_service), max_turns=2)
    traj = await run(agent, counter_row(call("add", amount=1), call("add", amount=1), call("add", amount=1)))
    assert traj.outcome is Outcome.truncated
    assert traj.reward == 0.0 and traj.metrics["turns"] == 2


async def test_token_budget_truncates(scripted_service):
    agent = make_agent(LocalModelClient(scripted_service), max_output_tokens=12, max_output_tokens_per_call=8)
    traj = await run(agent, counter_row(call("add", amount=1), call("add", amount=1), {"text": "2"}))
    assert traj.outcome is Outcome.truncated and traj.reward is not None
    assert sum(len(t.generation_token_ids) for t in traj.turns) <= 12


async def test_repeats_get_distinct_seeds_and_keep_their_group(scripted_service):
    agent = make_agent(LocalModelClient(scripted_service))
    row = counter_row({"text": "7"}, seed=11)
    a = await run(agent, row, RunContext(group_id="g1", sample_index=0, policy_version="v3"))
    b = await run(agent, row, RunContext(group_id="g1", sample_index=1, policy_version="v3"))
    assert (a.policy.sampling["seed"], b.policy.sampling["seed"]) == (11, 12)
    assert a.group_id == b.group_id == "g1" and a.task.task_id == b.task.task_id
    assert a.policy.policy_version == "v3"


class SeedRecorder(LocalModelClient):
    """The scripted model, recording the seed of every call it gets."""

    def __init__(self, service):
        super().__init__(service)
        self.seeds: list[int | None] = []

    async def create(self, request, **kwargs):
        self.seeds.append(request.get("seed"))
        return await super().create(request, **kwargs)


async def test_a_job_seed_gives_each_task_and_turn_its_own_stream_reproducibly(scripted_service):
    """One job seed shared verbatim by every task would replay the same random numbers in each:
    the same guess wherever the policy is unsure, so different tasks would pass or fail together."""
    model = SeedRecorder(scripted_service)
    agent = make_agent(model)
    turns = (call("add", amount=3), call("add", amount=4), {"text": "7"})

    async def job(seed: int) -> list[list[int | None]]:
        per_task = []
        for task_id in ("t1", "t2"):
            model.seeds.clear()
            ctx = RunContext(sampling={"seed": seed, "temperature": 1.0})
            await run(agent, {**counter_row(*turns), "task_id": task_id}, ctx)
            per_task.append(list(model.seeds))
        return per_task

    first = await job(5)
    t1, t2 = first
    assert len(t1) == len(t2) == 3 and None not in t1 + t2
    assert set(t1).isdisjoint(t2)  # the tasks draw different numbers
    assert len(set(t1)) == 3  # so does each turn of one episode
    assert await job(5) == first  # and the same job seed draws the same again
    assert (await job(6))[0] != t1


async def test_malformed_rows_and_unknown_envs_name_the_field_at_the_edge(scripted_service):
    agent = make_agent(LocalModelClient(scripted_service))
    with pytest.raises(BadRequest) as exc:
        await run(agent, {"env": "counter"})
    assert exc.value.field == "responses_create_params"
    with pytest.raises(BadRequest) as exc:
        await run(agent, {"responses_create_params": {"input": "x"}, "env": "chess"})
    assert exc.value.field == "env" and "chess" in exc.value.message
    with pytest.raises(BadRequest) as exc:
        await run(agent, {"responses_create_params": {"input": "x"}})
    assert exc.value.field == "env"


async def test_a_dead_model_server_is_a_model_error_not_reward_zero():
    dead = f"http://127.0.0.1:{free_port()}"
    model = HttpModelClient(dead, timeout_s=2.0)
    agent = make_agent(model)
    started = time.monotonic()
    traj = await run(agent, counter_row({"text": "7"}))
    await model.aclose()
    assert traj.outcome is Outcome.model_error and traj.reward is None
    assert traj.error.component == "model" and "connect" in traj.error.message
    assert time.monotonic() - started < 5


def slow_app(delay_s: float) -> FastAPI:
    """A model server that never answers in time (a stand-in for a stuck upstream)."""
    app = FastAPI()

    @app.post("/v1/responses")
    async def responses():
        await asyncio.sleep(delay_s)
        return {"output": []}

    return app


async def test_a_stuck_model_hits_the_call_timeout():
    with serve_in_thread(slow_app(4)) as url:
        model = HttpModelClient(url, timeout_s=30, retry=NO_RETRY)
        agent = make_agent(model, model_timeout_s=0.5)
        started = time.monotonic()
        traj = await run(agent, counter_row({"text": "7"}))
        elapsed = time.monotonic() - started
        await model.aclose()
    assert traj.outcome is Outcome.model_error and traj.error.kind.value == "timeout"
    assert elapsed < 3


async def test_the_episode_wall_clock_budget_is_enforced():
    with serve_in_thread(slow_app(4)) as url:
        model = HttpModelClient(url, timeout_s=30)
        agent = make_agent(model, model_timeout_s=30, episode_timeout_s=0.5)
        started = time.monotonic()
        traj = await run(agent, counter_row({"text": "7"}))
        elapsed = time.monotonic() - started
        await model.aclose()
    assert traj.outcome is Outcome.timeout and traj.reward is None
    assert elapsed < 3


async def test_cancel_ends_a_running_episode_as_cancelled():
    with serve_in_thread(slow_app(4)) as url:
        model = HttpModelClient(url, timeout_s=30)
        agent = make_agent(model)
        cancel = asyncio.Event()
        episode = asyncio.create_task(run(agent, counter_row({"text": "7"}), RunContext(cancel=cancel)))
        await asyncio.sleep(0.3)
        cancel.set()
        traj = await asyncio.wait_for(episode, 3)
        await model.aclose()
    assert traj.outcome is Outcome.cancelled and traj.reward is None and traj.error.kind.value == "cancelled"


async def test_an_unreachable_environment_is_an_env_error(scripted_service):
    env = HttpEnvClient("counter", f"http://127.0.0.1:{free_port()}", timeout_s=2)
    agent = make_agent(LocalModelClient(scripted_service), envs={"counter": env})
    traj = await run(agent, counter_row({"text": "7"}))
    await env.aclose()
    assert traj.outcome is Outcome.env_error and traj.reward is None and traj.error.component.startswith("env")


async def test_an_environment_dying_mid_episode_is_an_env_error(scripted_service):
    """The environment serves the seed over real HTTP, then goes away before the tool call."""
    runtime = EnvRuntime(CounterEnv(), MemorySessionStore())
    app = create_resources_app(runtime)
    calls = {"n": 0}

    @app.middleware("http")
    async def die_after_seed(request, call_next):
        calls["n"] += 1
        if "/tools/" in request.url.path:
            return await _broken()
        return await call_next(request)

    async def _broken():
        from fastapi.responses import JSONResponse

        return JSONResponse(
            {"error": {"kind": "internal", "message": "disk on fire", "component": "env"}}, status_code=500
        )

    with serve_in_thread(app) as url:
        env = HttpEnvClient("counter", url)
        agent = make_agent(LocalModelClient(scripted_service), envs={"counter": env})
        traj = await run(agent, counter_row(call("add", amount=1), {"text": "1"}))
        await env.aclose()
    assert traj.outcome is Outcome.env_error and traj.reward is None
    assert "disk on fire" in traj.error.message
    assert await runtime.store.count() == 0  # the session was still closed


async def test_math_episode_over_http_with_the_calculator(scripted_service):
    runtime = EnvRuntime(load_env("math"), MemorySessionStore())
    row = {
        "env": "math",
        "expected_answer": "42",
        "responses_create_params": {
            "input": "What is 6*7?",
            "metadata": {"rollgate_script": script(call("calculator", expression="6*7"), {"text": "Answer: 42"})},
        },
    }
    with serve_in_thread(create_resources_app(runtime)) as url:
        env = HttpEnvClient("math", url)
        agent = make_agent(LocalModelClient(scripted_service), envs={"math": env})
        traj = await run(agent, row)
        await env.aclose()
    outputs = [m["output"] for m in traj.messages if m.get("type") == "function_call_output"]
    assert outputs == ["42"]
    assert traj.outcome is Outcome.completed and traj.reward == 1.0


async def test_run_endpoint_answers_a_trajectory_or_nemo_gyms_shape(scripted_service):
    import httpx

    from rollgate.agent_server.server import run_router
    from rollgate.core.app import make_app

    app = make_app("agent", component="agent")
    app.include_router(run_router(make_agent(LocalModelClient(scripted_service))))
    row = counter_row(call("add", amount=5), {"text": "5"}, target=5)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent") as c:
        traj = Trajectory.model_validate((await c.post("/run", json=row)).json())
        assert traj.outcome is Outcome.completed and len(traj.turns) == 2
        nemo = (await c.post("/run?format=nemo_gym", json=row)).json()
        carriers = [i for i in nemo["response"]["output"] if "generation_token_ids" in i]
        assert nemo["reward"] == 1.5 and len(carriers) == 2
        assert (
            carriers[1]["prompt_token_ids"][: len(carriers[0]["prompt_token_ids"])] == carriers[0]["prompt_token_ids"]
        )
        bad = await c.post("/run", json={"env": "counter"})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "responses_create_params"


@pytest.mark.parametrize(
    ("phase", "component", "outcome"),
    [
        (Phase.seed, "env", Outcome.env_error),
        (Phase.model, "model", Outcome.model_error),
        (Phase.tool, "env", Outcome.env_error),
        (Phase.verify, "verify", Outcome.env_error),
    ],
)
def test_a_timeout_is_blamed_on_the_phase_it_happened_in(phase, component, outcome):
    f = failure(TimeoutError(), phase)
    assert f.outcome is outcome and f.error.component == component
    assert f.error.message == f"{phase.value} call exceeded its timeout"
