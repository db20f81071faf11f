"""Evaluation jobs with roles (`purpose: "eval"` and `roles`, docs/roles.md) on a real embedded
gateway on loopback (its job queue in memory, and on the real Redis): textarena's TicTacToe played
by scripted policies with the tiny model's tokenizer, and a second model server on loopback as the
other policy. The job's report gives each role's and each policy's win / draw / loss rates with
intervals, the same numbers as `rollgate eval play` on the job's own trajectories, and the
gateway's summary shows them under the policy version."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from rollgate.core.schemas import EpisodeRecord
from rollgate.evaluation.play import play_report
from tests.gateway.roles_stack import TTT, moves, other_policy_server, results, roles_gateway, ttt_rows

pytest.importorskip("textarena")

TTT3 = "textarena/ThreePlayerTicTacToe"  # a 5x5 board, a line of four wins
# the tiny model's own window is too short for three players' 5x5 boards; the scripted policies
# read nothing, so a longer window changes only where the episode would stop
LONG_CONTEXT = {"max_context_tokens": 16384}
# player_0 completes the top row whether it moves first or second: player_1 never completes a line first
A_WINS = {"player_0": {"metadata": moves(0, 1, 2)}, "player_1": {"model": "other-policy", "metadata": moves(6, 7, 3)}}


@pytest.fixture(scope="module")
def other_model_url(tiny_model_dir):
    with other_policy_server(tiny_model_dir, **LONG_CONTEXT) as url:
        yield url


@pytest.fixture(scope="module", params=["memory", "redis"])
def gateway_url(request, other_model_url):
    with roles_gateway(request, other_model_url, [TTT, TTT3], **LONG_CONTEXT) as url:
        yield url


def run_eval(c: httpx.Client, body: dict) -> tuple[str, list[dict], dict]:
    """Submit an evaluation job, read its records to the end, and its report."""
    r = c.post("/v1/rollouts", json={"purpose": "eval", **body})
    assert r.status_code == 201, r.text
    job = r.json()["job_id"]
    lines = results(c, job)
    for _ in range(50):  # the stream's end and the job's finished state are one step apart
        report = c.get(f"/v1/rollouts/{job}/report")
        if report.status_code != 409:
            break
        time.sleep(0.1)
    assert report.status_code == 200, report.text
    return job, lines, report.json()


def trajectories(lines: list[dict]):
    return [t for x in lines if x["type"] == "episode" for t in EpisodeRecord.model_validate(x["record"]).trajectories]


def test_an_eval_job_with_two_policies_reports_each_role_and_policy_as_eval_play_does(gateway_url):
    with httpx.Client(base_url=gateway_url, timeout=60) as c:
        job, lines, report = run_eval(c, {"tasks": ttt_rows(2), "k": 2, "roles": A_WINS, "policy_version": "v1"})
        assert c.get(f"/v1/rollouts/{job}").json()["roles"]["player_1"]["model"] == "other-policy"
        summary = c.get("/v1/rollouts/summary").json()
    assert report["kind"] == "rollgate.eval.play" and report["job"]["purpose"] == "eval"
    assert report["games"] == {"planned": 4, "with_result": 4, "without_result": {}}
    first, second = report["roles"]["player_0"], report["roles"]["player_1"]
    assert first["win"] == {"value": 1.0, "ci": [1.0, 1.0], "tasks": 2} and first["episodes"] == 4
    assert second["loss"]["value"] == 1.0 and second["win"]["value"] == 0.0 and second["score"]["value"] == 0.0
    assert report["policies"]["rollgate-tiny@v1"]["score"]["value"] == 1.0
    assert report["head_to_head"]["a"] == "other-policy@v1" and report["head_to_head"]["b"] == "rollgate-tiny@v1"
    assert report["model"]["name"] == ["other-policy", "rollgate-tiny"] and report["config"]["k"] == 2
    # the numbers of `rollgate eval play` on the job's own trajectories
    play = play_report(trajectories(lines))
    assert (report["roles"], report["policies"], report["head_to_head"]) == (
        play["roles"],
        play["policies"],
        play["head_to_head"],
    )
    [version] = [v for v in summary["versions"] if v["policy_version"] == "v1"]
    [entry] = [e for e in version["eval"] if e["job_id"] == job]
    assert entry["roles"]["player_0"]["win"]["value"] == 1.0 and entry["roles"]["player_1"]["episodes"] == 4
    assert entry["policies"]["other-policy@v1"]["value"] == 0.0 and entry["games"]["with_result"] == 4


def test_a_self_play_eval_job_gives_each_roles_rates_with_intervals_and_no_policy_table(gateway_url):
    """Task `decided`: player_0 takes cell 0, player_1 tries cell 0 twice and loses on the second
    invalid move. Task `stalled`: both only talk, so the game stops unfinished, a draw."""
    act = {"call": {"name": "act", "arguments": {"action": "[0]"}}}

    def row(task_id: str, turns: list[dict]) -> dict:
        meta = {"rollgate_script": json.dumps(turns)}
        return {"responses_create_params": {"input": "Play.", "metadata": meta}, "env": TTT, "task_id": task_id}

    rows = [row("decided", [act, act, {"text": "gg"}]), row("stalled", [{"text": "hmm"}] * 4)]
    roles = {"player_0": {}, "player_1": {}}
    with httpx.Client(base_url=gateway_url, timeout=60) as c:
        _, lines, report = run_eval(c, {"tasks": rows, "repeats": 2, "roles": roles, "policy_version": "p3"})
    first, second = report["roles"]["player_0"], report["roles"]["player_1"]
    assert (first["win"]["value"], first["draw"]["value"], first["loss"]["value"]) == (0.5, 0.5, 0.0)
    assert (second["win"]["value"], second["draw"]["value"], second["loss"]["value"]) == (0.0, 0.5, 0.5)
    assert first["win"]["ci"] == [0.0, 1.0] and first["score"]["value"] == 0.75
    assert report["policies"] == {} and "head_to_head" not in report  # self-play: no policy against another
    assert report["roles"] == play_report(trajectories(lines))["roles"]


def test_episodes_whose_role_failed_have_no_result_and_are_counted_apart(gateway_url):
    roles = {"player_0": {"metadata": moves(0, 1, 2)}, "player_1": {"model": "down"}}
    with httpx.Client(base_url=gateway_url, timeout=60) as c:
        _, _, report = run_eval(c, {"tasks": ttt_rows(1), "k": 2, "roles": roles, "retry_errors": 0})
    assert report["games"] == {"planned": 2, "with_result": 0, "without_result": {"model_error": 2}}
    assert report["roles"] == {} and report["policies"] == {}  # never a win or a loss


@pytest.mark.parametrize(
    ("extra", "field"), [({"threshold": 0.5}, "threshold"), ({"pass_k": [1]}, "pass_k")], ids=["threshold", "pass_k"]
)
def test_an_eval_job_with_roles_refuses_what_only_pass_at_k_scoring_takes(gateway_url, extra, field):
    body = {"tasks": ttt_rows(1), "purpose": "eval", "roles": {"player_0": {}, "player_1": {}}, **extra}
    with httpx.Client(base_url=gateway_url, timeout=60) as c:
        r = c.post("/v1/rollouts", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["field"] == field and "scored by play" in err["message"]


def test_a_three_player_game_runs_one_trajectory_per_role_and_reports_each_role(gateway_url):
    """player_0 completes cells 0-3 (a row of four) on its fourth move, before the others have
    four; textarena gives the winner 1 and each other player -1 (not zero-sum)."""
    roles = {
        "player_0": {"metadata": moves(0, 1, 2, 3)},
        "player_1": {"model": "other-policy", "metadata": moves(10, 11, 12, 13)},
        "player_2": {"metadata": moves(20, 21, 22, 23), "policy_version": "third"},
    }
    row = {"responses_create_params": {"input": "Play."}, "env": TTT3, "seed": 5, "task_id": "ttt3"}
    with httpx.Client(base_url=gateway_url, timeout=60) as c:
        assert c.get(f"/envs/{TTT3}/roles").json()["roles"] == {f"player_{i}": ["act"] for i in range(3)}
        _, lines, report = run_eval(c, {"tasks": [row], "k": 2, "roles": roles})
        r = c.post("/v1/rollouts", json={"tasks": [row], "roles": {"player_0": {}, "player_1": {}}})
        assert r.status_code == 400 and r.json()["error"]["field"] == "roles.player_2"  # every seat needs a policy
    trajs = trajectories(lines)
    assert len(trajs) == 6 and len({t.episode_id for t in trajs}) == 2
    for t in trajs:
        assert t.outcome.value == "completed" and t.reward == (1.0 if t.role == "player_0" else -1.0)
        assert t.turns and t.metrics["token_drift"] == 0
    assert {t.role: t.policy.model for t in trajs}["player_1"] == "other-policy"
    assert report["roles"]["player_0"]["win"]["value"] == 1.0
    assert report["roles"]["player_1"]["loss"]["value"] == report["roles"]["player_2"]["loss"]["value"] == 1.0
    scores = {p: b["score"]["value"] for p, b in report["policies"].items()}
    assert scores == {"rollgate-tiny": 1.0, "other-policy": 0.0, "rollgate-tiny@third": 0.0}
    assert "head_to_head" not in report  # three policies met: no single pair
