"""A task row is validated once, at the edge: one rollout submitted to the embedded shape (the
gateway's job route, the in-memory queue, a worker, the agent, the environment runtime, verify)
runs TaskRow validation exactly once, and its id, environment and row index ride along."""

from __future__ import annotations

import json
import time

import httpx

from rollgate.core import jsonutil
from rollgate.core.schemas import TaskRow
from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings


class CountingValidator:
    """Stands in for TaskRow's pydantic validator, counting every validation it delegates."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = 0

    def validate_python(self, *args, **kwargs):
        self.calls += 1
        return self.inner.validate_python(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_one_embedded_rollout_validates_its_row_once(tiny_model_dir, monkeypatch):
    from rollgate.stack.embedded import build_app

    settings = Settings(
        envs=["math"], gateway={"ui": False}, model={"backend": "scripted", "model_path": tiny_model_dir}
    )
    row = {
        "responses_create_params": {
            "input": "What is 6*7?",
            "metadata": {
                "rollgate_script": json.dumps(
                    [{"call": {"name": "calculator", "arguments": {"expression": "6*7"}}}, {"text": "Answer: 42"}]
                )
            },
        },
        "expected_answer": "42",
    }
    with serve_in_thread(build_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as client:
        counter = CountingValidator(TaskRow.__pydantic_validator__)
        monkeypatch.setattr(TaskRow, "__pydantic_validator__", counter)
        job = client.post("/v1/rollouts", json={"tasks": [row], "env": "math"}).json()
        deadline = time.monotonic() + 30
        while client.get(f"/v1/rollouts/{job['job_id']}").json()["state"] == "running":
            assert time.monotonic() < deadline, "the job did not finish"
            time.sleep(0.05)
        lines = [jsonutil.loads(x) for x in client.get(f"/v1/rollouts/{job['job_id']}/results").iter_lines()]
    [traj] = [x["record"] for x in lines if x["type"] == "trajectory"]
    assert traj["outcome"] == "completed" and traj["reward"] == 1.0, traj.get("error")
    assert traj["row_index"] == 0 and traj["task"]["env"] == "math"
    assert counter.calls == 1
