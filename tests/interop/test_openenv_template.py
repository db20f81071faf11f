"""The environment that OpenEnv's own `openenv init` generates (its echo template, unmodified),
served by OpenEnv's own server (`uvicorn server.app:app` from its folder, on loopback), driven
through Rollgate by URL: configured in Settings, run by the local stack's agent loop with the
scripted model. Slow tier: the CLI and each server process import openenv (10-20 s each here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("openenv", reason='OpenEnv tests need the optional extra "interop" (pip install -e ".[interop]")')

from rollgate.agent_server.agent import Agent  # noqa: E402
from rollgate.core.errors import NotFound, UpstreamError  # noqa: E402
from rollgate.core.rows import parse_row  # noqa: E402
from rollgate.core.schemas import Outcome  # noqa: E402
from rollgate.core.session_store import MemorySessionStore  # noqa: E402
from rollgate.core.settings import AgentSettings, Settings  # noqa: E402
from rollgate.model_server.client import LocalModelClient  # noqa: E402
from rollgate.model_server.server import build_service  # noqa: E402
from rollgate.resources_servers.base import EnvRuntime  # noqa: E402
from rollgate.resources_servers.client import LocalEnvClient  # noqa: E402
from rollgate.resources_servers.interop.openenv_env import OpenEnvEnvironment  # noqa: E402
from rollgate.resources_servers.interop.openenv_targets import OpenEnvServer  # noqa: E402
from rollgate.stack.parts import local_stack  # noqa: E402
from tests.conftest import free_port  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def template_dir(tmp_path_factory) -> Path:
    """`openenv init echo_box`, offline: PATH holds only this Python's folder, so the CLI's
    optional `uv lock` step is skipped instead of reaching a package index."""
    root = tmp_path_factory.mktemp("openenv_init")
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    done = subprocess.run(
        [sys.executable, "-m", "openenv.cli", "init", "echo_box", "--output-dir", str(root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    folder = root / "echo_box"
    assert done.returncode == 0 and (folder / "server" / "app.py").exists(), done.stdout[-2000:] + done.stderr[-2000:]
    return folder


def start_server(folder: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "server.app:app", "--host", "127.0.0.1", "--port", str(port)],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise RuntimeError("the OpenEnv template server did not start")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def template_url(template_dir):
    proc, url = start_server(template_dir)
    yield url
    proc.kill()
    proc.wait()


def row(*messages: str, env: str) -> dict:
    script = [{"call": {"name": "step", "arguments": {"message": m}}} for m in messages] + [{"text": "done"}]
    params = {"input": "echo things", "metadata": {"rollgate_script": json.dumps(script)}}
    return {"responses_create_params": params, "env": env, "seed": 3}


async def test_the_generated_template_plays_by_url_through_settings_and_the_local_stack(tiny_model_dir, template_url):
    settings = Settings(
        envs=[{"name": "echo_box", "kind": "openenv", "url": template_url}],
        model={"backend": "scripted", "model_path": tiny_model_dir},
    )
    stack = local_stack(settings)
    try:
        [tool] = await stack.agent.envs["echo_box"].tools()
        assert tool["name"] == "step" and tool["parameters"]["required"] == ["message"]
        # the template's server takes one session at a time (max_concurrent_envs=1): episodes run in turn
        for _ in range(3):
            traj = await stack.agent.run(parse_row(row("hello", "hi", env="echo_box"), known_envs=stack.agent.envs))
            assert traj.outcome is Outcome.completed, traj.error
            assert traj.messages[1]["content"] == '{"echoed_message":"Echo Box environment ready!","message_length":0}'
            outputs = [m["output"] for m in traj.messages if m.get("type") == "function_call_output"]
            assert outputs == [
                '{"echoed_message":"hello","message_length":5}',
                '{"echoed_message":"hi","message_length":2}',
            ]
            # the template pays min(0.1 * len(message), 1.0) per step; reward: sum
            assert traj.reward == pytest.approx(0.5 + 0.2) and traj.metrics["openenv_steps"] == 2
    finally:
        await stack.aclose()


async def test_no_tool_name_reaches_the_template_servers_reset_or_state(template_url):
    env = OpenEnvEnvironment(OpenEnvServer(template_url))
    runtime = EnvRuntime(env, MemorySessionStore())
    try:
        seeded = await runtime.seed({"responses_create_params": {"input": "x"}})
        for name in ["reset", "state", "close", "verify", "seed", "mcp"]:
            with pytest.raises(NotFound, match="unknown tool"):
                await runtime.call_tool(seeded.session_id, name, {"message": "x"})
        out = await runtime.call_tool(seeded.session_id, "step", {"message": "abc", "type": "reset"})
        assert out.is_error and "'type' was unexpected" in out.output
        assert (await runtime.verify(seeded.session_id, {"response": "x"})).metrics["openenv_steps"] == 0
    finally:
        await runtime.close(seeded.session_id)
        await env.aclose()


async def test_a_server_killed_mid_episode_is_env_error_naming_its_url(tiny_model_dir, template_dir):
    proc, url = start_server(template_dir)
    env = OpenEnvEnvironment(OpenEnvServer(url, connect_timeout_s=3), tool_timeout_s=5)
    runtime = EnvRuntime(env, MemorySessionStore())
    try:
        seeded = await runtime.seed({"responses_create_params": {"input": "x"}})
        assert (await runtime.call_tool(seeded.session_id, "step", {"message": "a"})).output.startswith('{"echoed')
        proc.kill()  # SIGKILL: no close frame, the socket just drops
        proc.wait()
        with pytest.raises(UpstreamError, match=f"OpenEnv server {url} closed the WebSocket during step"):
            await runtime.call_tool(seeded.session_id, "step", {"message": "b"})
        # the next episode, through the agent loop: env_error naming the URL, no reward
        service = build_service(Settings(model={"backend": "scripted", "model_path": tiny_model_dir}))
        agent = Agent(LocalModelClient(service), {env.name: LocalEnvClient(runtime)}, AgentSettings(), model_name="t")
        traj = await agent.run(parse_row(row("hello", env=env.name), known_envs=agent.envs))
        assert traj.outcome is Outcome.env_error and traj.reward is None
        assert traj.error.component == "openenv" and f"OpenEnv server {url} cannot be reached" in traj.error.message
    finally:
        await env.aclose()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
