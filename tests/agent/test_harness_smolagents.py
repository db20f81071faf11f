"""A real third-party harness, smolagents' `smolagent` command, pointed at the real tiny model
through the embedded stack over HTTP on loopback. The tiny model cannot solve anything; the
harness need not succeed. What is checked: its calls are captured, one Trajectory is assembled
from them (segmented: smolagents rewrites its history between steps) and verified, and nothing
leaks (no process, no session, no capture session, no directory).

Slow tier: the tiny model (a context raised to hold smolagents' ~5,400-token system prompt),
smolagents' own start-up and three model calls take ~20-40 s here."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from rollgate.core import jsonutil
from rollgate.core.schemas import Outcome, Trajectory
from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings
from tests.agent.harness_checks import processes_mentioning
from tests.conftest import free_port
from tests.gateway.rows import example_rows

pytestmark = pytest.mark.slow

CALLS = 3


def harness_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("rollgate-harness-*")}


# found as the harness agent finds it: on PATH, or beside this interpreter
SMOLAGENT = shutil.which(
    "smolagent", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
)


@pytest.mark.skipif(SMOLAGENT is None, reason="smolagents is not installed (pip install 'smolagents[openai]')")
def test_smolagents_calls_are_captured_assembled_verified_and_nothing_leaks(tiny_model_dir):
    from rollgate.stack.embedded import build_app

    port = free_port()
    settings = Settings(
        model={"model_path": tiny_model_dir, "max_context_tokens": 32768},
        envs=["math"],
        port=port,
        gateway={"ui": False},
        agents=[{"name": "smol", "kind": "smolagents", "max_calls": CALLS, "timeout_s": 240}],
    )
    app = build_app(settings)
    before = harness_dirs()
    with serve_in_thread(app, port=port, timeout_s=300) as url, httpx.Client(base_url=url, timeout=300) as client:
        started = time.monotonic()
        job = client.post("/v1/rollouts", json={"tasks": example_rows("math", 1), "agent": "smol"})
        assert job.status_code == 201, job.text
        lines = client.get(f"/v1/rollouts/{job.json()['job_id']}/results", params={"wait": "true"}).iter_lines()
        [record] = [r["record"] for r in map(jsonutil.loads, lines) if "record" in r]
        elapsed = time.monotonic() - started
        traj = Trajectory.model_validate(record)
        episode = "harness-" + traj.trajectory_id.removeprefix("traj_")

        # captured and assembled: every call is a turn of its own, each with exact token data
        assert traj.outcome in (Outcome.truncated, Outcome.completed), traj.error
        assert traj.reward is not None  # verified (the math environment scored the answer)
        assert 2 <= len(traj.turns) <= CALLS and traj.segmented
        assert traj.metrics["segments"] == len(traj.turns) and traj.metrics["model_calls"] >= len(traj.turns)
        for turn in traj.turns:
            assert len(turn.prompt_token_ids) > 4000  # smolagents' system prompt, as the model saw it
            assert len(turn.generation_token_ids) == len(turn.generation_log_probs) > 0
        assert traj.metrics["harness"] == "smol" and traj.policy.model == "rollgate-tiny"

        # nothing leaks
        assert processes_mentioning(episode) == []
        assert harness_dirs() == before
        assert len(app.state.service.captures) == 0
        assert client.get(f"/v1/captures/{episode}").status_code == 404
        assert len(app.state.runtimes["math"].store._data) == 0  # noqa: SLF001
        print(
            f"\nsmolagents episode: {elapsed:.1f}s, outcome {traj.outcome.value}, stopped by "
            f"{traj.metrics['stopped_by']}, {traj.metrics['model_calls']} calls captured, {len(traj.turns)} turns "
            f"({traj.metrics['segments']} segments), prompt tokens {[len(t.prompt_token_ids) for t in traj.turns]}, "
            f"generated {[len(t.generation_token_ids) for t in traj.turns]}, reward {traj.reward}"
        )
