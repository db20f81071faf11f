"""A harness agent playing one role of a multi-role episode (docs/roles.md, "Harness agents in a
role"): the harness runs as a subprocess per seat, its model calls captured token by token under a
capture session of its own, its moves sent over the session's MCP endpoint for its role in step
mode (each move returns once the turn is back, with the other role's move); the other role is the
shipped loop, or another harness.

Real parts: the embedded app served over HTTP on loopback, jobs submitted to its gateway route,
textarena's TicTacToe. The model is the scripted backend with the tiny model's real tokenizer
(each role's script is its policy's metadata: the loop sends it with each call, the harness
forwards ROLLGATE_METADATA). The harness is a small Python program written here that speaks Chat
Completions and MCP JSON-RPC over HTTP with httpx, as any harness would."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from rollgate.core import jsonutil
from rollgate.core.schemas import ErrorKind, Outcome, Trajectory
from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings
from rollgate.core.tokens import segments
from tests.agent.harness_checks import chat_loop, process_gone
from tests.conftest import free_port

pytest.importorskip("textarena")
pytest.importorskip("mcp")

TTT = "textarena/TicTacToe"
# A harness for one role: chat with the model (its role's metadata sent along), run each tool call
# over MCP (step mode: the call returns once it is this role's turn again), stop on a text reply.
PLAYER = textwrap.dedent(
    """
    import json, os, sys, time

    with open(os.path.join(os.environ["NOTES"], f"{os.getpid()}.pid"), "w") as f:  # what the test checks is gone
        f.write(os.environ["ROLLGATE_ROLE"])
    if sys.argv[1:] == ["stall"]:
        time.sleep(120)
    """
) + chat_loop(12, None)
QUITS = "import sys\nsys.stderr.write('quits: cannot play today\\n')\nsys.exit(3)\n"


def moves(*cells: int, then: str = "done") -> dict[str, str]:
    """A scripted role: one `act` per turn, then a text reply."""
    turns = [{"call": {"name": "act", "arguments": {"action": f"[{c}]"}}} for c in cells] + [{"text": then}]
    return {"rollgate_script": json.dumps(turns)}


@pytest.fixture(scope="module")
def stack(tiny_model_dir, tmp_path_factory):
    from rollgate.stack.embedded import build_app

    d: Path = tmp_path_factory.mktemp("role-harnesses")
    (d / "player.py").write_text(PLAYER)
    (d / "quits.py").write_text(QUITS)
    player, notes = [sys.executable, str(d / "player.py")], {"NOTES": str(d)}
    agents = [
        {"name": "player", "kind": "harness", "command": player, "timeout_s": 120, "env": notes},
        {"name": "stalls", "kind": "harness", "command": [*player, "stall"], "timeout_s": 3, "env": notes},
        {"name": "quits", "kind": "harness", "command": [sys.executable, str(d / "quits.py")]},
        {"name": "missing", "kind": "harness", "command": ["rollgate-test-no-such-harness", "{prompt}"]},
    ]
    port = free_port()
    settings = Settings(
        model={"backend": "scripted", "model_path": tiny_model_dir},
        envs=[TTT],
        port=port,
        gateway={"ui": False},
        agents=agents,
    )
    app = build_app(settings)
    with serve_in_thread(app, port=port, timeout_s=120) as url, httpx.Client(base_url=url, timeout=180) as client:
        yield client, app, d


def play(client: httpx.Client, roles: dict) -> dict:
    """One episode of TicTacToe (seed 7: player_0 moves first) through the gateway: its record."""
    row = {"responses_create_params": {"input": "Play TicTacToe."}, "env": TTT, "seed": 7}
    resp = client.post("/v1/rollouts", json={"tasks": [row], "roles": roles})
    assert resp.status_code == 201, resp.text
    lines = client.get(f"/v1/rollouts/{resp.json()['job_id']}/results", params={"wait": "true"}).iter_lines()
    [record] = [r["record"] for r in map(jsonutil.loads, lines) if "record" in r]
    return record


def by_role(record: dict) -> dict[str, Trajectory]:
    return {t["role"]: Trajectory.model_validate(t) for t in record["trajectories"]}


def assert_clean(stack) -> None:
    """Nothing of an episode outlives it: no harness process, capture session or environment session."""
    _, app, notes = stack
    assert len(app.state.service.captures) == 0  # every seat's capture session taken
    assert len(app.state.runtimes[TTT].store._data) == 0  # noqa: SLF001 - the session closed
    pids = [int(p.stem) for p in notes.glob("*.pid")]
    assert [p for p in pids if not process_gone(p)] == []


def harness_moves(traj: Trajectory) -> list[str]:
    return [json.loads(m["arguments"])["action"] for m in traj.messages if m.get("type") == "function_call"]


def seen_by_the_model(tiny_model_dir: str, traj: Trajectory) -> str:
    """The harness's last call's prompt as the model read it (its moves' results came back in it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir).decode(traj.turns[-1].prompt_token_ids)


def test_a_harness_plays_one_role_against_the_shipped_loop(stack, tiny_model_dir):
    client = stack[0]
    roles = {"player_0": {"agent": "player", "metadata": moves(0, 1, 2)}, "player_1": {"metadata": moves(3, 4)}}
    record = play(client, roles)
    assert record["outcome"] == "completed", [t["error"] for t in record["trajectories"]]
    h, loop = by_role(record)["player_0"], by_role(record)["player_1"]
    assert h.reward == 1.0 and loop.reward == -1.0  # the env's zero-sum rewards, per role
    assert h.episode_id == loop.episode_id == record["episode_id"] and h.outcome is Outcome.completed
    # the harness's calls, captured token by token under its own capture session: its three moves,
    # each prompt extending the one before (one growing sequence), then its closing reply
    assert harness_moves(h) == ["[0]", "[1]", "[2]"]
    assert len(h.turns) >= 3 and not h.segmented
    segments(h.turns)  # raises if any prompt does not extend the previous prompt + generation
    assert all(len(t.generation_token_ids) == len(t.generation_log_probs) > 0 for t in h.turns)
    assert h.metrics["harness"] == "player" and h.metrics["model_calls"] >= 3 and h.policy.sampling == {}
    # step mode: each move's result held the loop's answer, so the harness saw both of its moves
    seen = seen_by_the_model(tiny_model_dir, h)
    assert "Player 1 placed their symbol (X) in cell 3." in seen and "cell 4." in seen
    assert harness_moves(loop) == ["[3]", "[4]"] and loop.metrics["turns"] == 2 and "harness" not in loop.metrics
    # the loop's role stays token-exact on its own sequence, apart from the harness's
    assert loop.metrics["token_drift"] == 0 and h.turns[0].prompt_token_ids != loop.turns[0].prompt_token_ids
    assert_clean(stack)


def test_a_harness_on_each_role_plays_itself(stack):
    client = stack[0]
    record = play(
        client,
        {
            "player_0": {"agent": "player", "metadata": moves(0, 1, 2)},
            "player_1": {"agent": "player", "metadata": moves(3, 4)},
        },
    )
    assert record["outcome"] == "completed", [t["error"] for t in record["trajectories"]]
    roles = by_role(record)
    assert [roles[r].reward for r in ("player_0", "player_1")] == [1.0, -1.0]
    assert harness_moves(roles["player_0"]) == ["[0]", "[1]", "[2]"]
    assert harness_moves(roles["player_1"]) == ["[3]", "[4]"]  # started on its first turn, with player_0's move
    for t in roles.values():
        segments(t.turns)
        assert t.metrics["harness"] == "player" and not t.segmented and t.metrics["exit_code"] is not None
    assert_clean(stack)


def test_a_harness_that_stops_while_it_is_its_turn_leaves_the_game_unfinished(stack):
    client = stack[0]
    record = play(client, {"player_0": {"agent": "player", "metadata": moves(then="I resign")}, "player_1": {}})
    assert record["outcome"] == "truncated", record
    roles = by_role(record)
    assert [roles[r].reward for r in ("player_0", "player_1")] == [0.0, 0.0]  # unfinished: a draw, verified
    assert roles["player_0"].metrics["exit_code"] == 0 and len(roles["player_0"].turns) == 1
    assert roles["player_1"].turns == []  # never had the turn
    assert_clean(stack)


@pytest.mark.parametrize(
    ("agent", "kind", "says"),
    [
        ("quits", ErrorKind.upstream, "exited at once (exit code 3"),
        ("missing", ErrorKind.not_found, "command 'rollgate-test-no-such-harness' not found"),
    ],
)
def test_a_broken_harness_ends_the_episode_with_env_errors_for_every_role(stack, agent, kind, says):
    record = play(stack[0], {"player_0": {"agent": agent}, "player_1": {"metadata": moves(3, 4)}})
    assert record["outcome"] == "env_error", record
    for t in by_role(record).values():  # never a win or a loss
        assert t.outcome is Outcome.env_error and t.reward is None
        assert t.error.kind is kind and t.error.component == f"harness:{agent}"
        assert t.error.message.startswith(f"role player_0: harness '{agent}': {says}")
    if agent == "quits":  # the first lines of its stderr
        assert "quits: cannot play today" in t.error.message
    assert_clean(stack)


def test_a_harness_that_stalls_on_its_turn_runs_out_of_time_and_is_stopped(stack):
    client = stack[0]
    record = play(client, {"player_0": {"agent": "stalls"}, "player_1": {"metadata": moves(3, 4)}})
    assert record["outcome"] == "timeout", record
    for t in by_role(record).values():
        assert t.outcome is Outcome.timeout and t.reward is None
        assert t.error.message.startswith("role player_0: harness 'stalls' ran past its wall-clock budget (3s")
    assert_clean(stack)  # the stalled harness is gone with its episode


@pytest.mark.parametrize(
    ("policy", "field", "says"),
    [
        (
            {"agent": "nope"},
            "roles.player_0.agent",
            "accepted: rollgate, mini_swe_agent, missing, player, quits, smolagents",
        ),
        ({"agent": "player", "sampling": {"temperature": 0.5}}, "roles.player_0.sampling", "temperature"),
    ],
)
def test_a_role_agent_the_workers_cannot_seat_is_a_400_naming_the_field(stack, policy, field, says):
    client = stack[0]
    row = {"responses_create_params": {"input": "Play TicTacToe."}, "env": TTT, "seed": 7}
    resp = client.post("/v1/rollouts", json={"tasks": [row], "roles": {"player_0": policy, "player_1": {}}})
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["field"] == field and says in err["message"], err
