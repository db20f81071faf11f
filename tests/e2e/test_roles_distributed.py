"""Multi-role jobs in the distributed shape (docs/roles.md): a gateway and an agent worker of
their own (roles `gateway` and `agent`), a model server and a resources server, each served on a
loopback port and talking over real HTTP, the job queue on the real Redis. The environment is the
solver / grader example, which this gateway knows only by URL: it cannot check the roles at
submission, so the agent worker does, and a bad mapping becomes one failure record naming the role."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid

import httpx
import pytest

from rollgate.core.schemas import EpisodeRecord, FailureRecord, Outcome
from rollgate.core.serving import serve_in_thread
from rollgate.core.session_store import MemorySessionStore
from rollgate.core.settings import Settings
from rollgate.model_server.app import create_model_app
from rollgate.model_server.server import build_service
from rollgate.resources_servers.app import create_resources_app
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.envs.solve_grade import SolveGradeEnv

# served under a name of no installed environment, so the gateway knows it only by its URL
REMOTE = "solve_grade_by_url"
ROW = {"responses_create_params": {"input": "Solve, then grade."}, "question": "6 * 7?", "answer": 42}


def script(name: str, **arguments) -> dict[str, str]:
    return {"rollgate_script": json.dumps([{"call": {"name": name, "arguments": arguments}}, {"text": "done"}])}


@pytest.fixture(scope="module")
def gateway_url(redis_url, tiny_model_dir):
    from rollgate.gateway.server import build_app as gateway_app
    from rollgate.stack.agent_role import build_app as agent_app

    model = create_model_app(build_service(Settings(model={"backend": "scripted", "model_path": tiny_model_dir})))
    env = create_resources_app(EnvRuntime(SolveGradeEnv(), MemorySessionStore()))
    with contextlib.ExitStack() as stack:
        model_url = stack.enter_context(serve_in_thread(model, timeout_s=60))
        env_url = stack.enter_context(serve_in_thread(env, timeout_s=60))
        settings = Settings(
            redis_url=redis_url,
            model_url=model_url,
            env_urls={REMOTE: [env_url]},
            gateway={"auth": False, "ui": False, "queue_prefix": f"rgtest:{uuid.uuid4().hex[:12]}:q"},
            agent={"concurrency": 4},
        )
        gateway = gateway_app(settings)
        url = stack.enter_context(serve_in_thread(gateway, timeout_s=60))
        stack.enter_context(serve_in_thread(agent_app(settings), timeout_s=60))
        yield url
    with contextlib.suppress(Exception):
        asyncio.run(gateway.state.queue.clear())


def run_job(url: str, body: dict) -> list[dict]:
    with httpx.Client(base_url=url, timeout=60) as c:
        r = c.post("/v1/rollouts", json=body)
        assert r.status_code == 201, r.text
        lines = c.get(f"/v1/rollouts/{r.json()['job_id']}/results", params={"wait": "true"}, timeout=120)
    return [json.loads(x) for x in lines.text.splitlines() if x.strip()]


def test_solver_and_grader_run_through_the_gateway_and_a_remote_worker(gateway_url):
    roles = {
        "solver": {"metadata": script("submit", answer="42"), "policy_version": "solver-3"},
        "grader": {"metadata": script("grade", correct=False), "instructions": "You are a strict grader."},
    }
    lines = run_job(gateway_url, {"tasks": [ROW], "env": REMOTE, "roles": roles, "repeats": 2})
    episodes = [EpisodeRecord.model_validate(x["record"]) for x in lines if x["type"] == "episode"]
    assert len(episodes) == 2 and lines[-1]["type"] == "end"
    for e in episodes:
        assert e.outcome is Outcome.completed
        by_role = {t.role: t for t in e.trajectories}
        # the solver was right (1); the grader ruled it wrong, against the reference (0)
        assert by_role["solver"].reward == 1.0 and by_role["grader"].reward == 0.0
        assert by_role["solver"].policy.policy_version == "solver-3"
        assert all(t.turns and t.metrics["token_drift"] == 0 for t in e.trajectories)
        said = " ".join(str(m.get("content")) for m in by_role["grader"].messages if m.get("role") == "user")
        assert "Proposed answer: 42" in said and "6 * 7?" in said
    assert len({e.episode_id for e in episodes}) == 2 and len({e.group_id for e in episodes}) == 1


def test_a_mapping_the_gateway_could_not_check_is_refused_by_the_worker_naming_the_role(gateway_url):
    lines = run_job(gateway_url, {"tasks": [ROW], "env": REMOTE, "roles": {"solver": {}}})
    [failure] = [FailureRecord.model_validate(x["record"]) for x in lines if x["type"] == "failure"]
    assert failure.error.field == "roles.grader" and "solver, grader" in failure.error.message
