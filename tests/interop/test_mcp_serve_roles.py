"""A multi-role environment over MCP (docs/interop.md, docs/roles.md): one endpoint per role
(`/sessions/{id}/mcp?role=<role>`), driven by the official SDK's client on a real server on
loopback, standalone and through the gateway's proxy. Each role lists its own tools and calls as
itself: out of turn, or another role's tool, is an error result naming the role; an endpoint
naming no role or an unknown one is a 400 naming the roles; verify stays native, per role."""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("mcp", reason='MCP tests need the optional extra "interop" (pip install -e ".[interop]")')


from rollgate.core.session_store import MemorySessionStore  # noqa: E402
from rollgate.resources_servers.app import create_resources_app  # noqa: E402
from rollgate.resources_servers.base import EnvRuntime  # noqa: E402
from rollgate.resources_servers.envs.solve_grade import SolveGradeEnv  # noqa: E402
from tests.gateway.serving import serve_here  # noqa: E402
from tests.interop.mcp_serving import gateway_in_front, mcp_session  # noqa: E402
from tests.resources.toy_env import CounterEnv  # noqa: E402

ROW = {"responses_create_params": {"input": "solve and grade"}, "question": "2 + 3?", "answer": 5}
MCP_POST = {"accept": "application/json, text/event-stream"}
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


@pytest.fixture
def runtime() -> EnvRuntime:
    return EnvRuntime(SolveGradeEnv(), MemorySessionStore())


async def play_both_roles(base: str) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=30) as c:
        sid = (await c.post("/sessions", json=ROW)).json()["session_id"]
        question = (await c.post(f"/sessions/{sid}/observe", json={"role": "solver"})).json()["observation"]
        assert "2 + 3?" in question
        async with (
            mcp_session(f"{base}/sessions/{sid}/mcp?role=solver") as solver,
            mcp_session(f"{base}/sessions/{sid}/mcp?role=grader") as grader,
        ):
            assert [t.name for t in (await solver.list_tools()).tools] == ["submit"]
            assert [t.name for t in (await grader.list_tools()).tools] == ["grade"]
            early = await grader.call_tool("grade", {"correct": True})  # the solver moves first
            assert early.isError and "role 'grader' acted out of turn" in early.content[0].text
            assert early.meta == {"rollgate/turn": "solver", "rollgate/done": False}
            other = await solver.call_tool("grade", {"correct": True})  # the grader's tool
            assert other.isError and "role 'solver' cannot call 'grade'" in other.content[0].text
            moved = await solver.call_tool("submit", {"answer": "5"})
            assert not moved.isError and moved.meta == {"rollgate/turn": "grader", "rollgate/done": False}
            again = await solver.call_tool("submit", {"answer": "6"})
            assert again.isError and "it is 'grader''s turn" in again.content[0].text
            ruled = await grader.call_tool("grade", {"correct": True})
            assert not ruled.isError and ruled.meta == {"rollgate/turn": None, "rollgate/done": True}
        view = (await c.post(f"/sessions/{sid}/observe", json={"role": "grader"})).json()
        assert view["done"] is True
        verdicts = {r: (await c.post(f"/sessions/{sid}/verify", json={"role": r})).json()["reward"] for r in ROLES}
        assert verdicts == {"solver": 1.0, "grader": 1.0}  # the right answer, ruled right


ROLES = ("solver", "grader")


async def test_each_role_plays_its_own_endpoint_and_out_of_turn_calls_name_the_role(runtime):
    async with serve_here(create_resources_app(runtime)) as base:
        await play_both_roles(base)


async def test_through_the_gateway_proxy_the_role_reaches_the_replica(runtime):
    async with serve_here(create_resources_app(runtime)) as replica, gateway_in_front(replica, "solve_grade") as front:
        await play_both_roles(f"{front}/envs/solve_grade")


@pytest.mark.parametrize(("query", "says"), [("", "names no role"), ("?role=referee", "names role 'referee'")])
async def test_an_endpoint_naming_no_role_or_an_unknown_one_is_a_400_naming_the_roles(runtime, query, says):
    async with serve_here(create_resources_app(runtime)) as base, httpx.AsyncClient(base_url=base) as c:
        sid = (await c.post("/sessions", json=ROW)).json()["session_id"]
        r = await c.post(f"/sessions/{sid}/mcp{query}", json=LIST, headers=MCP_POST)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["field"] == "role" and says in err["message"] and "roles: solver, grader" in err["message"]
        assert "?role=solver" in err["message"]


async def test_a_role_on_a_single_role_environment_is_a_400():
    rt = EnvRuntime(CounterEnv(), MemorySessionStore())
    async with serve_here(create_resources_app(rt)) as base, httpx.AsyncClient(base_url=base) as c:
        sid = (await c.post("/sessions", json={"responses_create_params": {"input": "go"}})).json()["session_id"]
        r = await c.post(f"/sessions/{sid}/mcp?role=solver", json=LIST, headers=MCP_POST)
        assert r.status_code == 400 and r.json()["error"]["field"] == "role"
        assert "single role" in r.json()["error"]["message"]
