"""Multi-role environments over real HTTP on loopback (docs/roles.md): the environment says whose
turn it is, each role sees only its own view, acting out of turn or calling another role's tool
is a tool error naming the role, a call naming no role or an unknown one is a 400; rewards are
per role and a two-player game's add up to 0, draws included."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from rollgate.core.serving import serve_in_thread
from rollgate.core.session_store import MemorySessionStore
from rollgate.resources_servers.app import create_resources_app
from rollgate.resources_servers.base import Environment, EnvRuntime, tool
from rollgate.resources_servers.envs.solve_grade import SolveGradeEnv
from rollgate.resources_servers.registry import load_env

pytest.importorskip("textarena")

# A drawn game of TicTacToe: X (player_0) and O (player_1) fill the board with no line of three.
DRAW_X, DRAW_O = ["[0]", "[2]", "[5]", "[6]", "[7]"], ["[1]", "[3]", "[4]", "[8]"]


@pytest.fixture(scope="module")
def ttt_url():
    runtime = EnvRuntime(load_env("textarena/TicTacToe"), MemorySessionStore())
    with serve_in_thread(create_resources_app(runtime), timeout_s=60) as url:
        yield url


@pytest.fixture(scope="module")
def grade_url():
    with serve_in_thread(create_resources_app(EnvRuntime(SolveGradeEnv(), MemorySessionStore())), timeout_s=60) as url:
        yield url


def act(c: httpx.Client, sid: str, role: str, move: str) -> dict:
    r = c.post(f"/sessions/{sid}/tools/act", json={"arguments": {"action": move}, "role": role})
    assert r.status_code == 200, r.text
    return r.json()


def observe(c: httpx.Client, sid: str, role: str) -> dict:
    r = c.post(f"/sessions/{sid}/observe", json={"role": role})
    assert r.status_code == 200, r.text
    return r.json()


def rewards(c: httpx.Client, sid: str, roles=("player_0", "player_1")) -> dict[str, float]:
    out = {}
    for role in roles:
        r = c.post(f"/sessions/{sid}/verify", json={"role": role})
        assert r.status_code == 200, r.text
        out[role] = r.json()["reward"]
    return out


def test_the_environment_decides_whose_turn_and_each_role_sees_its_own_view(ttt_url):
    with httpx.Client(base_url=ttt_url) as c:
        assert c.get("/roles").json() == {"roles": {"player_0": ["act"], "player_1": ["act"]}, "zero_sum": True}
        seeded = c.post("/sessions", json={"responses_create_params": {"input": ""}, "seed": 1}).json()
        sid = seeded["session_id"]
        assert seeded["turn"] == "player_0"
        first = observe(c, sid, "player_0")
        assert first["turn"] == "player_0" and "Player 0" in first["observation"]
        assert observe(c, sid, "player_0")["observation"] == ""  # seen once: only what is new
        assert observe(c, sid, "player_1")["observation"] == ""  # nothing addressed to player_1 yet
        out = act(c, sid, "player_0", "[4]")
        assert out["is_error"] is False and out["turn"] == "player_1" and out["done"] is False
        view = observe(c, sid, "player_1")
        assert view["turn"] == "player_1" and "[4]" in view["observation"]  # the opponent's move, told to it


def test_acting_out_of_turn_is_a_tool_error_naming_the_role_and_the_session_is_unchanged(ttt_url):
    with httpx.Client(base_url=ttt_url) as c:
        sid = c.post("/sessions", json={"responses_create_params": {"input": ""}, "seed": 2}).json()["session_id"]
        out = act(c, sid, "player_1", "[4]")
        assert out["is_error"] and "'player_1' acted out of turn" in out["output"] and "'player_0'" in out["output"]
        assert out["turn"] == "player_0"
        assert act(c, sid, "player_0", "[4]")["turn"] == "player_1"  # the cell is still free: no move was made


def test_a_peek_says_whose_turn_it_is_and_marks_nothing_seen(grade_url):
    with httpx.Client(base_url=grade_url) as c:
        row = {"responses_create_params": {"input": "go"}, "question": "2 + 3?", "answer": 5}
        sid = c.post("/sessions", json=row).json()["session_id"]
        peeked = c.post(f"/sessions/{sid}/observe", json={"role": "solver", "peek": True}).json()
        assert peeked == {"role": "solver", "observation": "", "turn": "solver", "done": False}
        assert "2 + 3?" in observe(c, sid, "solver")["observation"]  # still unseen after the peek
        r = c.post(f"/sessions/{sid}/observe", json={"role": "solver", "peek": "yes"})
        assert r.status_code == 400 and r.json()["error"]["field"] == "peek"


async def test_both_env_clients_peek_without_marking_seen(grade_url):
    from rollgate.core.schemas import TaskRow
    from rollgate.resources_servers.client import HttpEnvClient, LocalEnvClient

    row = TaskRow.model_validate({"responses_create_params": {"input": "go"}, "question": "2 + 3?", "answer": 5})
    local = LocalEnvClient(EnvRuntime(SolveGradeEnv(), MemorySessionStore()))
    remote = HttpEnvClient("solve_grade", grade_url)
    try:
        for client in (local, remote):
            sid = (await client.seed(row)).session_id
            peeked = await client.observe(sid, "solver", peek=True)
            assert (peeked.turn, peeked.observation) == ("solver", "")
            assert "2 + 3?" in (await client.observe(sid, "solver")).observation
    finally:
        await remote.aclose()


def test_a_call_naming_no_role_or_an_unknown_one_is_a_400_listing_the_roles(ttt_url):
    with httpx.Client(base_url=ttt_url) as c:
        sid = c.post("/sessions", json={"responses_create_params": {"input": ""}, "seed": 3}).json()["session_id"]
        for body, what in (({"arguments": {"action": "[4]"}}, "names no role"), ({"role": "referee"}, "'referee'")):
            r = c.post(f"/sessions/{sid}/tools/act", json=body)
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["field"] == "role" and what in err["message"] and "player_0, player_1" in err["message"]
        r = c.post(f"/sessions/{sid}/observe", json={"role": "referee"})
        assert r.status_code == 400 and "player_0, player_1" in r.json()["error"]["message"]
        r = c.post(f"/sessions/{sid}/verify", json={})
        assert r.status_code == 400 and r.json()["error"]["field"] == "role"
        assert c.post("/sessions/nope/observe", json={"role": "player_0"}).status_code == 404


def test_a_won_game_and_a_drawn_game_give_rewards_that_sum_to_zero(ttt_url):
    with httpx.Client(base_url=ttt_url) as c:
        sid = c.post("/sessions", json={"responses_create_params": {"input": ""}, "seed": 4}).json()["session_id"]
        for x, o in zip(["[0]", "[1]", "[2]"], ["[3]", "[4]", None], strict=True):
            out = act(c, sid, "player_0", x)
            if o is not None:
                act(c, sid, "player_1", o)
        assert out["done"] is True and "turn" not in out  # nobody's turn: the game is over
        assert "your reward: -1" in observe(c, sid, "player_1")["observation"]
        assert rewards(c, sid) == {"player_0": 1.0, "player_1": -1.0}
        after = act(c, sid, "player_1", "[5]")
        assert after["is_error"] and "over" in after["output"]

        sid = c.post("/sessions", json={"responses_create_params": {"input": ""}, "seed": 5}).json()["session_id"]
        for i, x in enumerate(DRAW_X):
            out = act(c, sid, "player_0", x)
            if i < len(DRAW_O):
                out = act(c, sid, "player_1", DRAW_O[i])
        assert out["done"] is True
        assert rewards(c, sid) == {"player_0": 0.0, "player_1": 0.0}


def test_a_tool_of_another_role_is_a_tool_error_naming_both_roles_tools(grade_url):
    row = {"responses_create_params": {"input": "solve and grade"}, "question": "2 + 3?", "answer": 5}
    with httpx.Client(base_url=grade_url) as c:
        assert c.get("/roles").json()["roles"] == {"solver": ["submit"], "grader": ["grade"]}
        sid = c.post("/sessions", json=row).json()["session_id"]
        assert "2 + 3?" in observe(c, sid, "solver")["observation"]
        r = c.post(f"/sessions/{sid}/tools/grade", json={"arguments": {"correct": True}, "role": "solver"}).json()
        assert r["is_error"] and "cannot call 'grade'" in r["output"] and "has: submit" in r["output"]
        r = c.post(f"/sessions/{sid}/tools/submit", json={"arguments": {"answer": "5"}, "role": "solver"}).json()
        assert r["turn"] == "grader"
        view = observe(c, sid, "grader")["observation"]
        assert "Proposed answer: 5" in view and "reference" not in view.lower()
        r = c.post(f"/sessions/{sid}/tools/grade", json={"arguments": {"correct": False}, "role": "grader"}).json()
        assert r["done"] is True
        assert rewards(c, sid, ("solver", "grader")) == {"solver": 1.0, "grader": 0.0}  # a wrong ruling earns 0


def test_single_role_environments_are_unchanged_on_the_wire():
    env = load_env("math")
    assert env.roles == ()
    app = create_resources_app(EnvRuntime(env, MemorySessionStore()))
    with serve_in_thread(app, timeout_s=60) as url, httpx.Client(base_url=url) as c:
        seeded = c.post("/sessions", json={"responses_create_params": {"input": "1+1"}, "expected_answer": "2"})
        assert set(seeded.json()) == {"session_id", "observation"}
        sid = seeded.json()["session_id"]
        out = c.post(f"/sessions/{sid}/tools/calculator", json={"arguments": {"expression": "1+1"}}).json()
        assert set(out) == {"output", "is_error"}
        assert c.get("/roles").status_code == 404


def test_a_tool_naming_an_undeclared_role_is_refused_when_the_class_is_defined():
    with pytest.raises(TypeError, match="'referee' is not one of"):

        class Bad(Environment):
            roles = ("a", "b")

            @tool(role="referee")
            def whistle(self, state) -> str:
                return "ok"


async def test_the_guide_example_plays_as_documented():
    """docs/roles.md's example environment, run as written."""
    guide = (Path(__file__).parents[2] / "docs" / "roles.md").read_text()
    namespace: dict = {}
    exec(compile(guide.split("```python\n", 1)[1].split("```", 1)[0], "docs/roles.md", "exec"), namespace)
    env = namespace["HigherPick"]()
    rt = EnvRuntime(env, MemorySessionStore())
    seeded = await rt.seed({"responses_create_params": {"input": "pick"}})
    sid = seeded.session_id
    assert seeded.turn == "first" and (await rt.observe(sid, "first")).observation.startswith("Pick")
    early = await rt.call_tool(sid, "pick", {"number": 3}, "second")
    assert early.is_error and "out of turn" in early.output
    assert (await rt.call_tool(sid, "pick", {"number": 9}, "first")).is_error  # the environment's own rule
    assert (await rt.call_tool(sid, "pick", {"number": 2}, "first")).turn == "second"
    assert "has picked" in (await rt.observe(sid, "second")).observation
    last = await rt.call_tool(sid, "pick", {"number": 3}, "second")
    assert last.done is True and last.turn is None
    verdicts = [(await rt.verify(sid, {"role": r})).reward for r in env.roles]
    assert verdicts == [-1.0, 1.0] and sum(verdicts) == 0
