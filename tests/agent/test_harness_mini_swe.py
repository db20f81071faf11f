"""mini-swe-agent plays swe tasks as a harness agent, its commands run in the episode's sandbox.

A real `mini` (mini-swe-agent 2.4, its own virtual environment) runs as the `mini_swe_agent`
agent of the embedded stack served over HTTP on loopback, on a real validated task of
`swe/parse` (the quickest project). Its model is the scripted backend with the tiny model's
tokenizer, told through request metadata (mini's model_kwargs) what to answer: look around, then
change the code with a shell command, then submit. Every command goes through
`rollgate_mini_env.SessionEnvironment` to the session's `shell` tool. What is checked:

- the commands ran in the sandbox: they read the checkout by its relative path, their cwd is the
  sandbox's, and neither a host file nor the adapter's own folder is visible to them;
- the environment's normal verify judges what the commands left: the right fix scores 1.0, a
  wrong change 0, and a change to a test file 0 with the anti-cheating reason;
- a session that cannot run the commands (an environment without a `shell` tool) stops mini: an
  env_error naming the reason, no reward;
- each model call is captured token by token into one trajectory; nothing is left behind.

Slow tier: each episode imports litellm (11-15 s) in mini's own process. `mini` is found on PATH,
beside this interpreter, or at ROLLGATE_TEST_MINI (a venv of its own:
scripts/install-mini-swe-agent.sh, which CI runs first); without it the test is skipped."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import httpx
import pytest

from rollgate.agent_server import plugins
from rollgate.agent_server.harness.config import MINI_ENV_DIR
from rollgate.core import jsonutil
from rollgate.core.schemas import Outcome, Trajectory
from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings
from rollgate.resources_servers.families.swe import checkout
from rollgate.resources_servers.families.swe.patches import patch_strip
from rollgate.resources_servers.families.swe.projects import PROJECTS
from rollgate.resources_servers.families.swe.sources import ensure_source
from rollgate.resources_servers.families.swe.tasks import task_row, validated
from rollgate.sandbox.isolation import INNER_WORKDIR
from tests.agent.harness_checks import processes_mentioning
from tests.conftest import free_port
from tests.gateway.rows import REPO, example_rows

pytestmark = pytest.mark.slow

PROJECT = "parse"
ENV = f"swe/{PROJECT}"
MINI = os.environ.get("ROLLGATE_TEST_MINI") or shutil.which(
    "mini", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
)
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def bash(command: str) -> dict:
    return {"call": {"name": "bash", "arguments": {"command": command}}}


def mini_agent(name: str, script: list[dict]) -> dict:
    """A `mini_swe_agent` entry whose scripted model plays `script` (one turn per model call)."""
    metadata = {"metadata": {"rollgate_script": json.dumps(script)}}
    return {
        "name": name,
        "kind": "mini_swe_agent",
        "mini": MINI,
        # room for a whole diff in one reply (the server's default caps a reply's tokens lower)
        "mini_config": [
            "mini.yaml",
            f"model.model_kwargs.extra_body={json.dumps(metadata)}",
            "model.model_kwargs.max_tokens=4096",
        ],
        "max_calls": 8,
        "timeout_s": 240,
    }


@pytest.fixture(scope="module")
def row() -> dict:
    for tool in ("bwrap", "patch"):
        if shutil.which(tool) is None:
            pytest.skip(f"the swe family needs {tool}")
    project, home = PROJECTS[PROJECT], Settings().home
    files = checkout.pristine(ensure_source(project, home))
    [task] = validated(project, 1, home)
    return task_row(ENV, project, task, files, "mini-0")


@pytest.fixture(scope="module")
def secret(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("host") / "host-only.txt"
    path.write_text("HOST-SECRET-7f3a\n")
    return path


@pytest.fixture(scope="module")
def stack(tiny_model_dir, row, secret):
    from rollgate.stack.embedded import build_app

    source = row["mutation"]["path"]
    test_file = checkout.split_node_id(row["target_tests"][0])[0]
    gold = row["gold"]["calls"][0]["arguments"]["patch"]
    fix = f"patch -p{patch_strip(gold)} --batch <<'ROLLGATE_EOF'\n{gold}ROLLGATE_EOF"
    look = (
        f'echo "cwd=$(pwd)"; head -3 {source} && echo source-read; '
        f"cat {secret} || echo host-file-hidden; ls {MINI_ENV_DIR} || echo adapter-hidden"
    )
    agents = [
        mini_agent("mini-fix", [bash(look), bash(fix), bash(SUBMIT)]),
        mini_agent("mini-wrong", [bash(f"echo '# not the fix' >> {source}"), bash(SUBMIT)]),
        mini_agent("mini-cheat", [bash(fix), bash(f"echo '# edited' >> {test_file}"), bash(SUBMIT)]),
        mini_agent("mini-no-shell", [bash("echo hello"), bash(SUBMIT)]),  # played on `math`: no shell tool
    ]
    port = free_port()
    settings = Settings(
        # mini's instance template alone is ~2,100 tokens, over the tiny model's 2,048
        model={"backend": "scripted", "model_path": tiny_model_dir, "max_context_tokens": 32768},
        envs=[ENV, "math"],
        port=port,
        gateway={"ui": False},
        agents=agents,
    )
    with pytest.MonkeyPatch.context() as mp:
        # the agent kinds as pyproject.toml registers them (the installed metadata may predate one)
        with open(REPO / "pyproject.toml", "rb") as f:
            eps = tomllib.load(f)["project"]["entry-points"][plugins.GROUP]
        kinds = [EntryPoint(name=n, value=v, group=plugins.GROUP) for n, v in eps.items()]
        mp.setattr(plugins, "_installed", lambda: plugins.load_entry_points(kinds))
        app = build_app(settings)
    with serve_in_thread(app, port=port, timeout_s=300) as url, httpx.Client(base_url=url, timeout=300) as client:
        yield client, app


def submit(client: httpx.Client, row: dict, agent: str) -> str:
    resp = client.post("/v1/rollouts", json={"tasks": [row], "agent": agent})
    assert resp.status_code == 201, resp.text
    return resp.json()["job_id"]


def result(client: httpx.Client, job: str) -> Trajectory:
    lines = client.get(f"/v1/rollouts/{job}/results", params={"wait": "true"}).iter_lines()
    [record] = [r["record"] for r in map(jsonutil.loads, lines) if "record" in r]
    return Trajectory.model_validate(record)


def seen_by_the_model(tokenizer, traj: Trajectory) -> str:
    """The last call's prompt as the model read it: the commands' outputs came back in it."""
    return tokenizer.decode(traj.turns[-1].prompt_token_ids)


@pytest.mark.skipif(MINI is None, reason="mini-swe-agent is not installed (set ROLLGATE_TEST_MINI to its `mini`)")
def test_mini_swe_agent_commands_run_in_the_sandbox_and_the_sandbox_is_verified(stack, row, secret, tiny_model_dir):
    from transformers import AutoTokenizer

    client, app = stack
    started = time.monotonic()
    jobs = {agent: submit(client, row, agent) for agent in ("mini-fix", "mini-wrong", "mini-cheat")}
    no_shell = submit(client, example_rows("math", 1)[0], "mini-no-shell")
    trajs = {agent: result(client, job) for agent, job in jobs.items()}
    elapsed = time.monotonic() - started
    # a session whose environment has no `shell` tool stops mini: an infrastructure failure, no reward
    failed = result(client, no_shell)
    assert failed.outcome is Outcome.env_error and failed.reward is None, failed
    assert failed.error.component == "harness:mini-no-shell" and "crashed" in failed.error.message
    assert "rollgate_mini_env: the session refused 'shell'" in failed.error.message
    for agent, traj in trajs.items():
        assert traj.outcome is Outcome.completed, (agent, traj.error)
        assert traj.metrics["harness"] == agent and traj.metrics["exit_code"] == 0
        # every call captured, token-exact: mini sends its history back unchanged (native tool calls)
        assert len(traj.turns) == traj.metrics["model_calls"] >= 2 and not traj.segmented
        assert all(len(t.generation_token_ids) == len(t.generation_log_probs) > 0 for t in traj.turns)

    fix = trajs["mini-fix"]
    seen = seen_by_the_model(AutoTokenizer.from_pretrained(tiny_model_dir), fix)
    # (a) in the sandbox: the checkout is its cwd (a relative path reads the project's source), and
    # neither a host file nor the adapter's folder on the host exists there
    assert f"cwd={INNER_WORKDIR}" in seen and "source-read" in seen
    assert "host-file-hidden" in seen and "HOST-SECRET-7f3a" not in seen
    assert "adapter-hidden" in seen and "rollgate_mini_env.py" not in seen
    # mini was given the issue, not the environment's system prompt (which names tools it lacks)
    assert "Bug report for parse" in seen and "apply_patch" not in seen
    # (b) the environment's own verify judged the tree the commands left
    assert fix.reward == 1.0 and fix.metrics["resolved"], fix.metrics
    assert fix.metrics["changed_files"] == [row["mutation"]["path"]]
    wrong = trajs["mini-wrong"]
    assert wrong.reward == 0.0 and wrong.metrics["targets_fixed"] == 0 and not wrong.metrics["resolved"]
    # (c) the fix plus an edited test file: 0, and the reason
    cheat = trajs["mini-cheat"]
    assert cheat.reward == 0.0 and cheat.metrics["rejected"]
    assert "test file or the test runner's configuration" in cheat.metrics["error"]

    # nothing left: no process of an episode, no capture session, no environment session or sandbox
    for traj in trajs.values():
        assert processes_mentioning("harness-" + traj.trajectory_id.removeprefix("traj_")) == []
    assert len(app.state.service.captures) == 0
    runtime = app.state.runtimes[ENV]
    assert len(runtime.store._data) == 0 and runtime.env._live == {}  # noqa: SLF001
    print(
        f"\nmini-swe-agent on {ENV}: 3 episodes in {elapsed:.1f}s (concurrently), rewards "
        f"{ {a: t.reward for a, t in trajs.items()} }, calls {[t.metrics['model_calls'] for t in trajs.values()]}"
    )
