"""Rollgate environments served over MCP: the official SDK's client (`ClientSession` over
streamable HTTP) plays one seeded session on a real server on loopback, standalone, in the
embedded app's lazy /envs routes and through the gateway's proxy; verification stays on the
native route; no MCP name reaches seed, reset, verify, close or state."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
from fastapi import FastAPI

pytest.importorskip("mcp", reason='MCP tests need the optional extra "interop" (pip install -e ".[interop]")')

from mcp.shared.exceptions import McpError  # noqa: E402

from rollgate.core.session_store import MemorySessionStore  # noqa: E402
from rollgate.resources_servers.app import create_resources_app  # noqa: E402
from rollgate.resources_servers.base import EnvRuntime  # noqa: E402
from rollgate.resources_servers.lazy_routes import envs_router  # noqa: E402
from tests.gateway.serving import serve_here  # noqa: E402
from tests.interop.mcp_serving import gateway_in_front, mcp_session  # noqa: E402
from tests.resources.toy_env import CounterEnv  # noqa: E402


@pytest.fixture
def runtime() -> EnvRuntime:
    return EnvRuntime(CounterEnv(), MemorySessionStore())


async def seed(base: str, target: int = 7) -> str:
    async with httpx.AsyncClient(base_url=base) as c:
        r = await c.post("/sessions", json={"responses_create_params": {"input": "go"}, "target": target})
        r.raise_for_status()
        return r.json()["session_id"]


async def verify(base: str, sid: str, answer: str) -> dict:
    async with httpx.AsyncClient(base_url=base) as c:
        r = await c.post(f"/sessions/{sid}/verify", json={"response": answer})
        r.raise_for_status()
        return r.json()


async def play_and_verify(base: str, runtime: EnvRuntime) -> None:
    sid = await seed(base, target=7)
    async with mcp_session(f"{base}/sessions/{sid}/mcp") as s:
        listed = (await s.list_tools()).tools
        assert [t.name for t in listed] == [t["name"] for t in runtime.tools()]
        by_name = {t.name: t for t in listed}
        assert by_name["add"].inputSchema == runtime.tools()[0]["parameters"]
        assert by_name["add"].description == "Add an amount (1..5) to the counter."
        first = await s.call_tool("add", {"amount": 3})
        assert (first.isError, first.content[0].text) == (False, "value=3")
        assert (await s.call_tool("add", {"amount": 4})).content[0].text == "value=7"
        bad = await s.call_tool("add", {"amount": 9})
        assert bad.isError and "amount" in bad.content[0].text
    assert (await runtime.state(sid))["value"] == 7
    verdict = await verify(base, sid, "7")
    assert verdict == {"reward": 1.5, "reward_components": {"state": 1.0, "answer": 0.5}, "metrics": {}}


async def test_sdk_client_plays_one_seeded_session_and_verify_stays_native(runtime):
    async with serve_here(create_resources_app(runtime)) as base:
        await play_and_verify(base, runtime)


async def test_each_mcp_endpoint_is_bound_to_its_own_session(runtime):
    async with serve_here(create_resources_app(runtime)) as base:
        a, b = await seed(base), await seed(base)
        async with mcp_session(f"{base}/sessions/{a}/mcp") as s:
            await s.call_tool("add", {"amount": 2})
        async with mcp_session(f"{base}/sessions/{b}/mcp") as s:
            await s.call_tool("add", {"amount": 5})
        assert [(await runtime.state(x))["value"] for x in (a, b)] == [2, 5]


async def test_unknown_session_is_refused_before_any_mcp(runtime):
    async with serve_here(create_resources_app(runtime)) as base, httpx.AsyncClient(base_url=base) as c:
        r = await c.post(
            "/sessions/nope/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"accept": "application/json, text/event-stream"},
        )
        assert r.status_code == 404 and r.json()["error"]["field"] == "session_id"


LIFECYCLE_NAMES = ["seed", "verify", "close", "state", "delete", "sessions", "_call_tool", "__init__", "../verify"]


async def test_mcp_reaches_only_tools_never_lifecycle_operations(runtime):
    """The invariant (docs/api.md): whatever name a client invents, tools/call runs tools only."""
    async with serve_here(create_resources_app(runtime)) as base:
        sid = await seed(base, target=3)
        async with mcp_session(f"{base}/sessions/{sid}/mcp") as s:
            await s.call_tool("add", {"amount": 3})
            for name in LIFECYCLE_NAMES:
                out = await s.call_tool(name, {})
                assert out.isError and f"unknown tool {name!r}" in out.content[0].text, name
            # only tools are offered: no resources, prompts or completions to reach state through
            for other in (s.list_resources, s.list_prompts, s.list_resource_templates):
                with pytest.raises(McpError, match="not found"):
                    await other()
        # the session is intact: not reset, verified, closed or reseeded by any of those calls
        assert (await runtime.state(sid))["value"] == 3
        assert (await verify(base, sid, "3"))["reward"] == 1.5


async def test_served_in_the_embedded_apps_lazy_env_routes_family_names_too(runtime):
    app = FastAPI()
    app.include_router(envs_router({"counter": runtime, "fam/counter": runtime}))
    async with serve_here(app) as base:
        await play_and_verify(f"{base}/envs/counter", runtime)
        await play_and_verify(f"{base}/envs/fam/counter", runtime)


async def test_served_through_the_gateway_proxy(runtime):
    async with serve_here(create_resources_app(runtime)) as replica, gateway_in_front(replica, "counter") as front:
        await play_and_verify(f"{front}/envs/counter", runtime)


def test_mcp_is_not_imported_on_the_start_up_path():
    code = (
        "import sys; import rollgate.resources_servers.app, rollgate.resources_servers.lazy_routes; "
        "assert not [m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')], 'mcp imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
