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


# --- step mode: `?role=R&wait=S` (a harness playing one role waits for its turn in its calls) -------
TTT_ROW = {"responses_create_params": {"input": "Play"}, "seed": 7}


def act(cell: int, rpc_id: int = 1) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "tools/call",
        "params": {"name": "act", "arguments": {"action": f"[{cell}]"}},
    }


@pytest.fixture
def ttt_app():
    pytest.importorskip("textarena")
    from rollgate.resources_servers.registry import load_env

    return create_resources_app(EnvRuntime(load_env("textarena/TicTacToe"), MemorySessionStore()))


async def turn_of(c: httpx.AsyncClient, sid: str) -> str | None:
    return (await c.post(f"/sessions/{sid}/observe", json={"role": "player_0", "peek": True})).json()["turn"]


async def test_a_move_in_step_mode_returns_once_the_turn_is_back_with_the_other_roles_move(ttt_app):
    import asyncio

    async with serve_here(ttt_app) as base, httpx.AsyncClient(base_url=base, timeout=30) as c:
        sid = (await c.post("/sessions", json=TTT_ROW)).json()["session_id"]
        assert await turn_of(c, sid) == "player_0"
        url = f"/sessions/{sid}/mcp?role=player_0&wait=20"
        move = asyncio.ensure_future(c.post(url, json=act(4), headers=MCP_POST))
        while await turn_of(c, sid) != "player_1":  # player_0's move is made...
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        assert not move.done()  # ...and its call waits for the turn to come back
        # a peek marks nothing seen: player_1 still reads the whole board afterwards
        reply = await c.post(f"/sessions/{sid}/tools/act", json={"arguments": {"action": "[0]"}, "role": "player_1"})
        assert reply.json()["turn"] == "player_0"
        result = (await move).json()["result"]
        text = result["content"][0]["text"]
        assert not result["isError"] and text.startswith("Move made")
        assert "Player 1 placed their symbol (X) in cell 0." in text  # the opponent's move, in the step's answer
        assert result["_meta"] == {"rollgate/turn": "player_0", "rollgate/done": False}
        # what the step showed is marked seen: the native observe has nothing new for player_0
        assert (await c.post(f"/sessions/{sid}/observe", json={"role": "player_0"})).json()["observation"] == ""


async def test_a_call_out_of_turn_in_step_mode_waits_for_the_turn_then_moves(ttt_app):
    import asyncio

    async with serve_here(ttt_app) as base, httpx.AsyncClient(base_url=base, timeout=30) as c:
        sid = (await c.post("/sessions", json=TTT_ROW)).json()["session_id"]
        early = asyncio.ensure_future(
            c.post(f"/sessions/{sid}/mcp?role=player_1&wait=20", json=act(0), headers=MCP_POST)
        )
        await asyncio.sleep(0.3)
        assert not early.done()  # player_0 has not moved: player_1's call waits
        await c.post(f"/sessions/{sid}/tools/act", json={"arguments": {"action": "[4]"}, "role": "player_0"})
        while await turn_of(c, sid) != "player_0":  # player_1's waiting call has moved...
            await asyncio.sleep(0.02)
        assert not early.done()  # ...and waits for the turn to come back
        # a call out of turn whose wait runs out: refused, and it says whose turn it still is
        later = (await c.post(f"/sessions/{sid}/mcp?role=player_1&wait=0.3", json=act(8, 2), headers=MCP_POST)).json()
        text = later["result"]["content"][0]["text"]
        assert later["result"]["isError"] and "acted out of turn" in text
        assert "it is still 'player_0''s turn" in text
        await c.post(f"/sessions/{sid}/tools/act", json={"arguments": {"action": "[2]"}, "role": "player_0"})
        first = (await early).json()["result"]
        assert not first["isError"] and first["content"][0]["text"].startswith("Move made")
        assert "Player 0 placed their symbol (O) in cell 2." in first["content"][0]["text"]


@pytest.mark.parametrize("wait", ["0", "-1", "abc", "99999", "nan"])
async def test_a_bad_wait_is_a_400_naming_wait(ttt_app, wait):
    async with serve_here(ttt_app) as base, httpx.AsyncClient(base_url=base) as c:
        sid = (await c.post("/sessions", json=TTT_ROW)).json()["session_id"]
        r = await c.post(f"/sessions/{sid}/mcp?role=player_0&wait={wait}", json=LIST, headers=MCP_POST)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["field"] == "wait" and "at most 3600" in r.json()["error"]["message"]
