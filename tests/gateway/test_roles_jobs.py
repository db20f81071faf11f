"""Jobs with roles through the gateway and `rollgate collect` (docs/roles.md): a real embedded
gateway on loopback (its job queue in memory, and on the real Redis), scripted policies with the
tiny model's tokenizer, and a second model server on loopback as the other policy.

Each episode is one `episode` record on the results stream holding one trajectory per role;
`rollgate collect` writes one line per role. Bad role mappings are a 400 naming the role."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import httpx
import pytest

from rollgate.cli import main
from rollgate.core import jsonutil
from rollgate.core.schemas import EpisodeRecord, Outcome, Trajectory
from tests.gateway.roles_stack import TTT, moves, other_policy_server, results, roles_gateway, ttt_rows

pytest.importorskip("textarena")


@pytest.fixture(scope="module")
def other_model_url(tiny_model_dir):
    with other_policy_server(tiny_model_dir) as url:
        yield url


@pytest.fixture(scope="module", params=["memory", "redis"])
def gateway_url(request, other_model_url):
    with roles_gateway(request, other_model_url, [TTT, "math"]) as url:
        yield url


def test_a_self_play_job_yields_one_episode_record_per_sample_with_a_trajectory_per_role(gateway_url):
    roles = {"player_0": {"metadata": moves(0, 1, 2)}, "player_1": {"metadata": moves(3, 4)}}
    with httpx.Client(base_url=gateway_url, timeout=60) as c:
        r = c.post("/v1/rollouts", json={"tasks": ttt_rows(2), "repeats": 2, "roles": roles, "policy_version": "p7"})
        assert r.status_code == 201, r.text
        assert r.json()["num_tasks"] == 4  # episodes: rows x repeats
        lines = results(c, r.json()["job_id"])
    episodes = [EpisodeRecord.model_validate(line["record"]) for line in lines if line["type"] == "episode"]
    assert len(episodes) == 4 and lines[-1]["type"] == "end"
    assert lines[-1]["progress"]["counts"] == {"completed": 4}
    assert len({e.episode_id for e in episodes}) == 4
    by_group: dict[str, int] = {}
    for e in episodes:
        assert [t.role for t in e.trajectories] == ["player_0", "player_1"]
        assert {t.episode_id for t in e.trajectories} == {e.episode_id}
        assert {t.group_id for t in e.trajectories} == {e.group_id}
        assert [t.reward for t in e.trajectories] == [1.0, -1.0]
        by_group[e.group_id] = by_group.get(e.group_id, 0) + 1
        for t in e.trajectories:
            assert t.policy.policy_version == "p7" and t.policy.model == "rollgate-tiny"
            assert t.turns and t.metrics["token_drift"] == 0
            for prev, cur in pairwise(t.turns):
                assert cur.prompt_token_ids[: len(prev.prompt_token_ids) + len(prev.generation_token_ids)] == (
                    prev.prompt_token_ids + prev.generation_token_ids
                )
    assert sorted(by_group.values()) == [2, 2]  # the repeats of a row share its group


def test_bad_role_mappings_are_a_400_naming_the_role_and_what_is_accepted(gateway_url):
    good = {"player_0": {}, "player_1": {}}
    cases = [
        ({"roles": {**good, "referee": {}}}, "roles.referee", "player_0, player_1"),
        ({"roles": {"player_0": {}}}, "roles.player_1", "player_0, player_1"),
        (
            {"roles": {**good, "player_1": {"model": "gpt-9"}}},
            "roles.player_1.model",
            "down, other-policy, rollgate-tiny",
        ),
        ({"roles": {**good, "player_0": {"agent": "nope"}}}, "roles.player_0.agent", "accepted: rollgate, mini_swe"),
        (
            {"roles": {**good, "player_0": {"agent": "smolagents", "sampling": {"seed": 1}}}},
            "roles.player_0.sampling",
            "seed",
        ),
        ({"roles": {**good, "player_0": {"sampling": {"temprature": 1}}}}, "roles.player_0.sampling.temprature", ""),
        ({}, "roles", "player_0, player_1"),  # a multi-role environment without roles
        ({"roles": good, "purpose": "eval", "threshold": 0.5}, "threshold", "scored by play"),
    ]
    with httpx.Client(base_url=gateway_url, timeout=60) as c:
        for extra, field, accepted in cases:
            r = c.post("/v1/rollouts", json={"tasks": ttt_rows(1), **extra})
            assert r.status_code in (400, 422), (extra, r.text)
            err = r.json()["error"]
            assert err["field"] == field and accepted in err["message"], (extra, err)
        math_row = {"responses_create_params": {"input": "1+1"}, "env": "math", "expected_answer": "2"}
        r = c.post("/v1/rollouts", json={"tasks": [math_row], "roles": good})
        assert r.status_code == 400 and r.json()["error"]["field"] == "tasks[0].env"
        assert "single role" in r.json()["error"]["message"]


def test_cancelling_a_roles_job_gives_each_unfinished_episode_a_cancelled_trajectory_per_role(gateway_url):
    slow = [{"call": {"name": "act", "arguments": {"action": "[0]"}}, "delay_s": 30}]
    roles = {"player_0": {"metadata": {"rollgate_script": json.dumps(slow)}}, "player_1": {"metadata": moves(3)}}
    with httpx.Client(base_url=gateway_url, timeout=60) as c:
        job = c.post("/v1/rollouts", json={"tasks": ttt_rows(2), "roles": roles}).json()["job_id"]
        assert c.delete(f"/v1/rollouts/{job}").status_code == 200
        lines = results(c, job)
    episodes = [EpisodeRecord.model_validate(x["record"]) for x in lines if x["type"] == "episode"]
    assert len(episodes) == 2
    for e in episodes:
        assert e.outcome is Outcome.cancelled
        assert sorted(t.role for t in e.trajectories) == ["player_0", "player_1"]
        assert all(t.reward is None and t.episode_id == e.episode_id for t in e.trajectories)


def test_one_roles_model_down_fails_every_role_of_the_episode_and_a_retry_reruns_the_whole_episode(gateway_url):
    roles = {"player_0": {"metadata": moves(0, 1, 2)}, "player_1": {"model": "down"}}
    with httpx.Client(base_url=gateway_url, timeout=60) as c:
        r = c.post("/v1/rollouts", json={"tasks": ttt_rows(1), "roles": roles, "retry_errors": 1})
        assert r.status_code == 201, r.text
        lines = results(c, r.json()["job_id"])
    [episode] = [EpisodeRecord.model_validate(x["record"]) for x in lines if x["type"] == "episode"]
    assert episode.outcome is Outcome.model_error and lines[-1]["progress"]["counts"] == {"model_error": 1}
    for t in episode.trajectories:
        assert t.outcome is Outcome.model_error and t.reward is None  # never a win or a loss
        assert t.error.message.startswith("role player_1:") and t.attempts == 2
        assert [a["outcome"] for a in t.metrics["attempt_errors"]] == ["model_error"]


def test_collect_with_two_policies_writes_one_line_per_role_and_resumes_by_episode(gateway_url, tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(b"".join(jsonutil.dumps(r) + b"\n" for r in ttt_rows(2)))
    roles = tmp_path / "roles.json"
    roles.write_text(
        json.dumps(
            {
                "player_0": {"metadata": moves(4, 0, 8), "policy_version": "a"},
                "player_1": {"model": "other-policy", "metadata": moves(2, 6), "sampling": {"temperature": 0.5}},
            }
        )
    )
    out = tmp_path / "out.jsonl"
    argv = ["collect", "--tasks", str(tasks), "--out", str(out), "--gateway", gateway_url, "--no-progress"]
    assert main([*argv, "--roles", str(roles), "--repeats", "2"]) == 0
    trajs = [Trajectory.model_validate_json(x) for x in out.read_bytes().splitlines()]
    assert len(trajs) == 8  # 2 rows x 2 repeats x 2 roles
    by_episode: dict[str, list[Trajectory]] = {}
    for t in trajs:
        by_episode.setdefault(t.episode_id, []).append(t)
    assert len(by_episode) == 4
    for pair in by_episode.values():
        models = {t.role: (t.policy.model, t.policy.policy_version, t.policy.sampling.get("temperature")) for t in pair}
        assert models == {"player_0": ("rollgate-tiny", "a", None), "player_1": ("other-policy", None, 0.5)}
        assert sum(t.reward for t in pair) == 0
    # re-running finds every task's two episodes: nothing is submitted again
    assert main([*argv, "--roles", str(roles), "--repeats", "2"]) == 0
    assert len(out.read_bytes().splitlines()) == 8


def test_collect_refuses_roles_that_are_not_an_object(gateway_url, tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(jsonutil.dumps(ttt_rows(1)[0]) + b"\n")
    argv = ["collect", "--tasks", str(tasks), "--out", str(tmp_path / "o.jsonl"), "--gateway", gateway_url]
    assert main([*argv, "--roles", "[1, 2]", "--no-progress"]) == 2
    assert "--roles" in capsys.readouterr().err
    assert not Path(tmp_path / "o.jsonl").exists()


def test_eval_play_reports_rates_per_role_and_two_policies_head_to_head_over_both_seatings(gateway_url, tmp_path):
    out = tmp_path / "games.jsonl"
    # each seating: whoever sits at player_0 plays the winning line
    seatings = [
        ({"policy_version": "A"}, {"model": "other-policy"}),
        ({"model": "other-policy"}, {"policy_version": "A"}),
    ]
    for n, (first, second) in enumerate(seatings):
        rows = [dict(r, task_id=f"seat{n}-{r['task_id']}") for r in ttt_rows(2)]
        tasks = tmp_path / f"tasks{n}.jsonl"
        tasks.write_bytes(b"".join(jsonutil.dumps(r) + b"\n" for r in rows))
        roles = {"player_0": {**first, "metadata": moves(0, 1, 2)}, "player_1": {**second, "metadata": moves(3, 4)}}
        argv = ["collect", "--tasks", str(tasks), "--out", str(out), "--gateway", gateway_url, "--no-progress"]
        assert main([*argv, "--roles", json.dumps(roles), "--repeats", "2"]) == 0
    report_path = tmp_path / "play.json"
    assert main(["eval", "play", str(out), "--out", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["envs"] == [TTT] and report["failures"] == {}
    first_mover = report["roles"]["player_0"]
    assert first_mover["episodes"] == 8 and first_mover["win"]["value"] == 1.0 and first_mover["loss"]["value"] == 0
    h2h = report["head_to_head"]
    assert (h2h["a"], h2h["b"]) == ("other-policy", "rollgate-tiny@A")
    assert h2h["episodes"] == 8 and h2h["tasks"] == 4 and h2h["draw"]["value"] == 0
    assert h2h["score"]["value"] == 0.5 and h2h["score"]["ci"][0] < 0.5 < h2h["score"]["ci"][1]


def test_eval_play_refuses_trajectories_without_roles(tmp_path, capsys):
    single = Trajectory.model_validate(
        {"group_id": "g", "task": {"env": "math", "task_id": "t", "row": {}}, "policy": {"model": "m"}}
        | {"outcome": "completed", "reward": 1.0}
    )
    src = tmp_path / "single.jsonl"
    src.write_text(single.model_dump_json() + "\n")
    assert main(["eval", "play", str(src)]) == 2
    assert "no role" in capsys.readouterr().err
