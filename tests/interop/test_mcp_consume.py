"""Environments whose tools come from an external MCP server (a small server written with the
official SDK, tests/interop/counter_mcp_server.py, over stdio and streamable HTTP), played by
Rollgate's real agent loop with the scripted model backend. A server that cannot be reached,
dies mid-episode or answers garbage ends the episode with env_error naming it, in bounded time."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("mcp", reason='MCP tests need the optional extra "interop" (pip install -e ".[interop]")')

from rollgate.agent_server.agent import Agent  # noqa: E402
from rollgate.core.errors import UpstreamError  # noqa: E402
from rollgate.core.rows import parse_row  # noqa: E402
from rollgate.core.schemas import Outcome, VerifyRequest, VerifyResult  # noqa: E402
from rollgate.core.session_store import MemorySessionStore  # noqa: E402
from rollgate.core.settings import AgentSettings, Settings  # noqa: E402
from rollgate.model_server.client import LocalModelClient  # noqa: E402
from rollgate.model_server.server import build_service  # noqa: E402
from rollgate.resources_servers.base import EnvRuntime, final_response_text  # noqa: E402
from rollgate.resources_servers.client import LocalEnvClient  # noqa: E402
from rollgate.resources_servers.interop.mcp_client import (  # noqa: E402
    MCPServer,
    MCPSessionState,
    MCPToolsEnvironment,
)
from tests.conftest import free_port  # noqa: E402

SERVER = str(Path(__file__).with_name("counter_mcp_server.py"))
STDIO = [sys.executable, SERVER, "stdio"]


class CounterState(MCPSessionState):
    target: int = 0


class MCPCounter(MCPToolsEnvironment):
    """Tools from the MCP server; the verifier is ours and reads the server's total."""

    name = "mcp_counter"
    State = CounterState
    tool_timeout_s = 3.0

    def seed(self, task, rng):
        return CounterState(target=int(task.env_fields["target"]))

    async def verify(self, state: CounterState, request: VerifyRequest) -> VerifyResult:
        total = int(await self.call_server(state, "read_total", {}))
        hit = float(total == state.target)
        said = 0.5 if final_response_text(request).strip() == str(state.target) else 0.0
        return VerifyResult(reward=hit + said, reward_components={"state": hit, "answer": said})


def row(*turns, target: int = 7) -> dict:
    return {
        "responses_create_params": {"input": "count to the target", "metadata": {"rollgate_script": json.dumps(turns)}},
        "env": "mcp_counter",
        "target": target,
    }


def call(name: str, **arguments) -> dict:
    return {"call": {"name": name, "arguments": arguments}}


@pytest.fixture
def scripted_service(tiny_model_dir):
    return build_service(Settings(model={"backend": "scripted", "model_path": tiny_model_dir}))


async def play(service, env: MCPToolsEnvironment, task: dict):
    agent = Agent(
        LocalModelClient(service),
        {env.name: LocalEnvClient(EnvRuntime(env, MemorySessionStore()))},
        AgentSettings(),
        model_name="rollgate-tiny",
    )
    return await agent.run(parse_row(task, known_envs=agent.envs))


@pytest.fixture
def http_server():
    port = free_port()
    proc = subprocess.Popen([sys.executable, SERVER, "http", str(port)], stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.TransportError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("the test MCP server did not start") from None
            time.sleep(0.1)
    yield proc, url
    proc.kill()
    proc.wait()


async def test_stdio_server_tools_play_a_whole_episode_and_our_verifier_scores_it(scripted_service):
    env = MCPCounter(MCPServer(command=STDIO))
    try:
        names = [t["name"] for t in env.tool_schemas()]
        assert names == ["add", "read_total", "refuse", "crash", "babble"]
        assert env.tool_schemas()[0]["parameters"]["properties"]["amount"]["type"] == "integer"
        traj = await play(
            scripted_service, env, row(call("add", amount=3), call("refuse"), call("add", amount=4), {"text": "7"})
        )
        assert traj.outcome is Outcome.completed, traj.error
        assert traj.reward == 1.5 and traj.reward_components == {"state": 1.0, "answer": 0.5}
        outputs = [m["output"] for m in traj.messages if m.get("type") == "function_call_output"]
        assert outputs[0] == "total=3" and "the counter refuses" in outputs[1] and outputs[2] == "total=7"
        assert traj.metrics["tool_errors"] == 1
        # a second episode gets its own server process: its total starts at zero
        again = await play(scripted_service, env, row(call("add", amount=2), {"text": "2"}, target=2))
        assert again.reward == 1.5
    finally:
        await env.aclose()


async def test_bad_arguments_are_an_error_output_naming_the_field(scripted_service):
    env = MCPCounter(MCPServer(command=STDIO))
    try:
        traj = await play(scripted_service, env, row(call("add", amount="three"), {"text": "0"}, target=0))
        outputs = [m["output"] for m in traj.messages if m.get("type") == "function_call_output"]
        assert outputs[0].startswith("error: invalid arguments for add: amount:")
        assert traj.outcome is Outcome.completed and traj.reward == 1.5
    finally:
        await env.aclose()


async def test_streamable_http_server_plays_an_episode(scripted_service, http_server):
    _, url = http_server
    env = MCPCounter(MCPServer(url=url))
    try:
        traj = await play(scripted_service, env, row(call("add", amount=7), {"text": "7"}))
        assert traj.outcome is Outcome.completed, traj.error
        assert traj.reward == 1.5
    finally:
        await env.aclose()


async def test_a_server_that_dies_mid_episode_is_env_error_naming_its_command(scripted_service):
    env = MCPCounter(MCPServer(command=STDIO))
    try:
        traj = await play(scripted_service, env, row(call("add", amount=1), call("crash"), {"text": "1"}))
        assert traj.timings.tools_s < env.tool_timeout_s + 2  # the dead server is noticed, not waited on
        assert traj.outcome is Outcome.env_error and traj.reward is None
        assert traj.error.component == "mcp" and SERVER in traj.error.message
    finally:
        await env.aclose()


async def test_garbage_on_the_stream_is_env_error_within_the_tool_timeout(scripted_service):
    env = MCPCounter(MCPServer(command=STDIO))
    try:
        traj = await play(scripted_service, env, row(call("babble"), {"text": "0"}, target=0))
        # The tool phase ends at the tool timeout (plus slack for a loaded machine), not in a hang;
        # spawning the server and closing it are outside this bound.
        assert traj.timings.tools_s < env.tool_timeout_s + 2
        assert traj.outcome is Outcome.env_error and traj.reward is None
        assert traj.error.component == "mcp" and SERVER in traj.error.message
        assert f"within {env.tool_timeout_s:g}s" in traj.error.message
    finally:
        await env.aclose()


async def test_an_http_server_gone_mid_run_is_env_error_naming_its_url(scripted_service, http_server):
    proc, url = http_server
    env = MCPCounter(MCPServer(url=url))  # start-up lists the tools while it runs
    proc.kill()
    proc.wait()
    try:
        traj = await play(scripted_service, env, row(call("add", amount=1), {"text": "1"}))
        assert traj.outcome is Outcome.env_error and traj.reward is None
        assert traj.error.component == "mcp" and url in traj.error.message
    finally:
        await env.aclose()


def test_start_up_names_an_unreachable_url_or_a_missing_command():
    url = f"http://127.0.0.1:{free_port()}/mcp"
    with pytest.raises(UpstreamError, match=f"MCP server {url} did not list its tools"):
        MCPCounter(MCPServer(url=url, connect_timeout_s=5))
    with pytest.raises(UpstreamError, match="no-such-mcp-server"):
        MCPCounter(MCPServer(command=["no-such-mcp-server"], connect_timeout_s=5))


def test_configuration_errors_name_the_field():
    with pytest.raises(ValueError, match="exactly one of `command`"):
        MCPServer()
    with pytest.raises(ValueError, match="MCPServer.command"):
        MCPServer(command="python server.py")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="MCPServer.url"):
        MCPServer(url="127.0.0.1:9/mcp")


async def test_the_store_holds_only_serialisable_state(scripted_service):
    env = MCPCounter(MCPServer(command=STDIO))
    runtime = EnvRuntime(env, MemorySessionStore())
    try:
        seeded = await runtime.seed({"responses_create_params": {"input": "x"}, "target": 2})
        await runtime.call_tool(seeded.session_id, "add", {"amount": 2})
        state = await runtime.state(seeded.session_id)
        assert json.loads(json.dumps(state)) == state and state["mcp_opened"] is True
        assert (await runtime.verify(seeded.session_id, VerifyRequest(response="2"))).reward == 1.5
        # once its connection is closed (or on a replica that never opened it) the session is
        # refused, not silently restarted against a fresh server
        await env.close_session(CounterState.model_validate(state))
        with pytest.raises(UpstreamError, match="MCP connection is gone"):
            await runtime.call_tool(seeded.session_id, "add", {"amount": 1})
    finally:
        await env.aclose()


async def test_closing_the_session_closes_its_mcp_connection(scripted_service):
    env = MCPCounter(MCPServer(command=STDIO))
    runtime = EnvRuntime(env, MemorySessionStore())
    try:
        seeded = await runtime.seed({"responses_create_params": {"input": "x"}, "target": 2})
        await runtime.call_tool(seeded.session_id, "add", {"amount": 1})
        assert len(env._conns) == 1  # the session's server process is open
        assert await runtime.close(seeded.session_id)
        assert env._conns == {}  # released at DELETE, not after the idle timeout
        assert not await runtime.close(seeded.session_id)  # closing twice is harmless
    finally:
        await env.aclose()
