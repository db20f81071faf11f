"""`rollgate eval compare A B --env GAME`: two policies play textarena's TicTacToe against each
other, seats balanced, and the report gives A's score (a draw 1/2) with its interval and the
win / draw / loss counts. In process (the embedded stack) and through a real gateway on loopback.

The policies whose results are known by construction are the scripted backend with the tiny
model's tokenizer (a move list per side, sent as that side's metadata); B is a second model
server on loopback named in `role_models`, so the two sides are two different models. The real
tiny model plays too (two sampling settings): its moves are not legal TicTacToe, so every game
stops unfinished, a draw."""

from __future__ import annotations

import json

import httpx
import pytest

from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings
from rollgate.model_server.app import create_model_app
from rollgate.model_server.server import build_service
from tests.evaluation.conftest import read_jsonl

pytest.importorskip("textarena")

TTT = "textarena/TicTacToe"
TTT3 = "textarena/ThreePlayerTicTacToe"


def side(*cells: int, **policy) -> str:
    """A policy that plays `cells` in order, one `act` per turn, then says gg."""
    turns = [{"call": {"name": "act", "arguments": {"action": f"[{c}]"}}} for c in cells] + [{"text": "gg"}]
    return json.dumps({**policy, "metadata": {"rollgate_script": json.dumps(turns)}})


# A completes the top row whether it moves first or second: B never completes a line first.
A_WINS = side(0, 1, 2)
B_LOSES = side(6, 7, 3, model="other-policy", sampling={"temperature": 0.7})
# Against this B, whoever moves first completes its row first: one win and one loss per task.
B_MIRRORS = side(3, 4, 5, model="other-policy")


@pytest.fixture(scope="module")
def other_model_url(tiny_model_dir):
    settings = Settings(model={"backend": "scripted", "model_path": tiny_model_dir, "served_name": "other-policy"})
    with serve_in_thread(create_model_app(build_service(settings)), timeout_s=60) as url:
        yield url


@pytest.fixture(scope="module")
def config(other_model_url, tmp_path_factory):
    path = tmp_path_factory.mktemp("h2h") / "settings.yaml"
    path.write_text(f"role_models:\n  other-policy: {other_model_url}\n")
    return path


@pytest.fixture(scope="module")
def gateway_url(other_model_url):
    from rollgate.stack.embedded import build_app

    settings = Settings(
        model={"backend": "scripted"},
        envs=[TTT, "math"],
        gateway={"ui": False, "auth": False},
        role_models={"other-policy": other_model_url},
    )
    with serve_in_thread(build_app(settings), timeout_s=120) as url:
        yield url


def compare(run_cli, tmp_path, a: str, b: str, *extra) -> tuple[int, dict, str, str]:
    out = tmp_path / "h2h.json"
    rc, stdout, stderr = run_cli("eval", "compare", a, b, "--env", TTT, "--out", out, "--no-progress", *extra)
    return rc, (json.loads(out.read_text()) if rc == 0 else {}), stdout, stderr


def check_a_wins_every_game(report: dict) -> None:
    assert report["kind"] == "rollgate.eval.head_to_head" and report["env"] == TTT
    assert report["games"] == {"planned": 8, "with_result": 8, "without_result": {}}
    assert report["counts"] == {"win": 8, "draw": 0, "loss": 0}
    assert report["a_score"]["value"] == 1.0 and report["tasks"] == 2
    # balanced: A sat in each seat for half the games, and won from both
    assert {r: b["counts"]["win"] for r, b in report["by_a_role"].items()} == {"player_0": 4, "player_1": 4}
    assert report["a"]["model"] == "rollgate-tiny" and report["b"]["model"] == "other-policy"
    assert report["b"]["policy"]["sampling"] == {"temperature": 0.7}


def test_in_process_two_models_play_both_seats_and_a_wins_every_game(run_cli, tmp_path, config):
    games = tmp_path / "games.jsonl"
    rc, report, stdout, stderr = compare(
        run_cli, tmp_path, A_WINS, B_LOSES, "--n", 2, "--seed", 1, "--games", 2, "--backend", "scripted",
        "--config", config, "--trajectories", games,
    )  # fmt: skip
    assert rc == 0, stderr
    check_a_wins_every_game(report)
    assert "A overall" in stdout and "1.000 [1.000, 1.000]" in stdout and "A as player_1" in stdout
    trajs = read_jsonl(games)
    assert len(trajs) == 16 and len({t["episode_id"] for t in trajs}) == 8  # one line per role per game
    for t in trajs:
        assert t["policy"]["model"] in ("rollgate-tiny", "other-policy") and t["reward"] in (1.0, -1.0)
        assert (t["reward"] == 1.0) == (t["policy"]["model"] == "rollgate-tiny")


def test_a_draw_counts_half_and_first_mover_wins_give_an_even_score(run_cli, tmp_path, config):
    rc, report, _, stderr = compare(
        run_cli, tmp_path, A_WINS, B_MIRRORS, "--n", 3, "--seed", 2, "--backend", "scripted", "--config", config
    )
    assert rc == 0, stderr
    assert report["counts"] == {"win": 3, "draw": 0, "loss": 3}
    assert report["by_a_role"]["player_0"]["counts"] == {"win": 3, "draw": 0, "loss": 0}
    assert report["by_a_role"]["player_1"]["counts"] == {"win": 0, "draw": 0, "loss": 3}
    assert report["a_score"]["value"] == 0.5 and report["verdict"] == "no detectable difference"


def test_pinned_seats_play_one_seating_only(run_cli, tmp_path, config):
    rc, report, _, stderr = compare(
        run_cli, tmp_path, A_WINS, B_MIRRORS, "--n", 2, "--seed", 1, "--seats", "player_1,player_0",
        "--backend", "scripted", "--config", config,
    )  # fmt: skip
    assert rc == 0, stderr
    assert report["seats"] == {"A": "player_1", "B": "player_0"} and list(report["by_a_role"]) == ["player_1"]
    assert report["counts"] == {"win": 0, "draw": 0, "loss": 2}  # B moves first and completes its row
    assert report["a_score"]["value"] == 0.0


def test_the_tiny_model_against_itself_at_two_temperatures_draws_unfinished_games(run_cli, tmp_path):
    a = json.dumps({"sampling": {"temperature": 0.3, "max_output_tokens": 8}})
    b = json.dumps({"sampling": {"temperature": 1.0, "max_output_tokens": 8}, "policy_version": "hot"})
    rc, report, _, stderr = compare(run_cli, tmp_path, a, b, "--n", 2, "--seed", 1, "--max-turns", 2)
    assert rc == 0, stderr
    assert report["counts"] == {"win": 0, "draw": 4, "loss": 0}  # stopped unfinished: a draw, 0 each
    assert report["a_score"]["value"] == 0.5 and report["rates"]["draw"]["value"] == 1.0
    assert report["b"]["policy"] == {"sampling": {"temperature": 1.0, "max_output_tokens": 8}, "policy_version": "hot"}


def test_through_a_gateway_gives_the_in_process_result(run_cli, tmp_path, gateway_url):
    rc, report, _, stderr = compare(
        run_cli, tmp_path, A_WINS, B_LOSES, "--n", 2, "--seed", 1, "--games", 2, "--gateway", gateway_url
    )
    assert rc == 0, stderr
    check_a_wins_every_game(report)
    # each seating ran as an evaluation job with roles: the gateway reports it per role and policy
    assert len(report["gateway_jobs"]) == 2
    for job in report["gateway_jobs"]:
        gateway_report = httpx.get(f"{gateway_url}/v1/rollouts/{job}/report", timeout=30).json()
        assert gateway_report["job"]["purpose"] == "eval" and gateway_report["games"]["with_result"] == 4
        assert gateway_report["policies"]["rollgate-tiny"]["win"]["value"] == 1.0
        assert gateway_report["policies"]["other-policy"]["loss"]["value"] == 1.0


def test_the_gateway_names_a_sides_unknown_model_and_a_single_role_env(run_cli, tmp_path, gateway_url):
    at = ("--n", 1, "--seed", 1, "--gateway", gateway_url)
    rc, _, _, stderr = compare(run_cli, tmp_path, "rollgate-tiny", "gpt-9", *at)
    assert rc == 2 and "(field B.model)" in stderr and "other-policy" in stderr
    rc, _, stderr = run_cli("eval", "compare", "a", "b", "--env", "math", *at)
    assert rc == 2 and "single role" in stderr and "(field --env)" in stderr


@pytest.mark.parametrize(
    ("args", "field", "says"),
    [
        (["--env", "math", "--n", "1"], "--env", "single role"),
        (["--env", "no/such-game"], "--env", "unknown environment"),
        (["--env", TTT, "--seats", "player_0,referee"], "--seats", "player_0, player_1"),
        (["--env", TTT, "--seats", "player_1,player_1"], "--seats", "cannot both sit"),
        (["--env", TTT, "--seats", "player_1"], "--seats", "A's role and B's role"),
        (["--env", TTT, "--games", "0"], "--games", ">= 1"),
        (["--env", TTT, "--threshold", "0.5"], "--threshold", "won, drawn or lost"),
        (["--n", "3"], "--n", "add --env GAME"),
    ],
)
def test_bad_input_is_refused_naming_the_field(run_cli, tmp_path, args, field, says):
    rc, _, stderr = compare_raw(run_cli, "rollgate-tiny", "rollgate-tiny", "--seed", 1, *args)
    assert rc == 2 and f"(field {field})" in stderr and says in stderr, stderr


@pytest.mark.parametrize(
    ("a", "b", "field", "says"),
    [
        ('{"sampling": {"temprature": 1}}', "rollgate-tiny", "A.sampling.temprature", "Extra inputs"),
        ("rollgate-tiny", "gpt-9", "B.model", "known: rollgate-tiny"),
        ('{"agent": "smolagents"}', "rollgate-tiny", "A.agent", "cannot play a role"),
        ("[1, 2]", "rollgate-tiny", "A", "a policy is an object"),
        ("rollgate-tiny", "missing.yaml", "B", "no such file"),
    ],
)
def test_a_bad_policy_is_refused_naming_its_side(run_cli, a, b, field, says):
    rc, _, stderr = compare_raw(run_cli, a, b, "--env", TTT, "--n", 1, "--seed", 1, "--backend", "scripted")
    assert rc == 2 and f"(field {field})" in stderr and says in stderr, stderr


def compare_raw(run_cli, a: str, b: str, *args):
    return run_cli("eval", "compare", a, b, "--no-progress", *args)


def self_play_rows(tmp_path):
    """Plain `rollgate eval` on a game: one script for both seats (the row's). Task `decided`:
    player_0 takes cell 0, player_1 tries cell 0 twice, and a second invalid move loses.
    Task `stalled`: both only talk, so the game stops unfinished, a draw."""

    def row(task_id: str, turns: list[dict]) -> dict:
        meta = {"rollgate_script": json.dumps(turns)}
        return {"responses_create_params": {"input": "Play.", "metadata": meta}, "env": TTT, "task_id": task_id}

    act = {"call": {"name": "act", "arguments": {"action": "[0]"}}}
    rows = [row("decided", [act, act, {"text": "gg"}]), row("stalled", [{"text": "hmm"}] * 4)]
    path = tmp_path / "games.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("where", ["in process", "gateway"])
def test_plain_eval_on_a_game_reports_each_roles_win_draw_and_loss_rates(run_cli, tmp_path, request, where):
    at = ("--gateway", request.getfixturevalue("gateway_url")) if where == "gateway" else ("--backend", "scripted")
    out = tmp_path / "run"
    rc, stdout, stderr = run_cli(
        "eval", "--env", TTT, "--tasks", self_play_rows(tmp_path), "--k", 2, "--out", out, "--max-turns", 2,
        "--policy-version", "p3", "--no-progress", *at,
    )  # fmt: skip
    assert rc == 0, stderr
    report = json.loads((out / "play.json").read_text())
    assert report["kind"] == "rollgate.eval.play" and report["games"]["with_result"] == 4
    first, second = report["roles"]["player_0"], report["roles"]["player_1"]
    assert (first["win"]["value"], first["draw"]["value"], first["loss"]["value"]) == (0.5, 0.5, 0.0)
    assert (second["win"]["value"], second["draw"]["value"], second["loss"]["value"]) == (0.0, 0.5, 0.5)
    assert first["win"]["ci"] == [0.0, 1.0] and first["episodes"] == 4  # two tasks: one won, one drawn
    assert "role player_0" in stdout and "self-play" in stdout
    trajs = read_jsonl(out / "trajectories.jsonl")
    assert len(trajs) == 8 and {t["policy"]["policy_version"] for t in trajs} == {"p3"}
    if where == "gateway":  # one evaluation job with roles, whose own report gives the same rates
        [job] = report["gateway_jobs"]
        gateway_report = httpx.get(f"{at[1]}/v1/rollouts/{job}/report", timeout=30).json()
        assert gateway_report["roles"] == report["roles"] and gateway_report["model"]["policy_version"] == ["p3"]


def test_plain_eval_on_a_game_refuses_what_applies_to_single_role_envs(run_cli, tmp_path):
    tasks = self_play_rows(tmp_path)
    base = ("eval", "--tasks", tasks, "--k", 1, "--out", tmp_path / "o", "--backend", "scripted", "--no-progress")
    rc, _, stderr = run_cli(*base, "--env", TTT, "--env", "math")
    assert rc == 2 and "(field --env)" in stderr and "on its own" in stderr
    rc, _, stderr = run_cli(*base, "--env", TTT, "--resume")
    assert rc == 2 and "(field --resume)" in stderr


def test_plain_eval_on_a_three_player_game_seats_the_model_in_every_role(run_cli, tmp_path):
    """Self-play of textarena's ThreePlayerTicTacToe: the model in all three seats. Both tasks are
    played with every seat only talking, so each game stops unfinished: a draw for every role."""
    talk = {"rollgate_script": json.dumps([{"text": "hm"}])}
    rows = [
        {"responses_create_params": {"input": "Play.", "metadata": talk}, "env": TTT3, "task_id": f"t{i}"}
        for i in range(2)
    ]
    tasks = tmp_path / "ttt3.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    rc, stdout, stderr = run_cli(
        "eval", "--env", TTT3, "--tasks", tasks, "--k", 1, "--out", out,
        "--max-turns", 1, "--backend", "scripted", "--no-progress",
    )  # fmt: skip
    assert rc == 0, stderr
    report = json.loads((out / "play.json").read_text())
    assert report["games"]["with_result"] == 2 and sorted(report["roles"]) == ["player_0", "player_1", "player_2"]
    assert all(block["draw"]["value"] == 1.0 for block in report["roles"].values())
    trajs = read_jsonl(out / "trajectories.jsonl")
    assert len(trajs) == 6 and {t["role"] for t in trajs} == {"player_0", "player_1", "player_2"}
