"""`rollgate eval reverify`: stored trajectories re-scored with today's verifiers, no model
calls. "answer" environments (math) re-verify the stored final answer; "replay" environments
(wordle) replay the stored tool calls first and refuse to score a replay that diverges."""

from __future__ import annotations

import json

import pytest

from rollgate.core import jsonutil
from rollgate.resources_servers.envs.math_env import MathEnv
from tests.evaluation.conftest import SCRIPTED, math_row, read_jsonl, report_of, write_jsonl
from tests.gateway.rows import example_rows


def evaluate(run_cli, tmp_path, rows, env: str, k: int = 2):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", rows)
    out = tmp_path / "run"
    rc, _, stderr = run_cli("eval", "--env", env, "--tasks", tasks, "--k", k, "--out", out, *SCRIPTED)
    assert rc == 0, stderr
    return out


def test_reverify_lists_the_samples_a_fixed_verifier_scores_differently(run_cli, tmp_path):
    rows = [math_row(f"t{i}", i, 2, None if i < 3 else "0") for i in range(5)]
    run = evaluate(run_cli, tmp_path, rows, "math")
    # Simulate trajectories scored by an old, buggy verifier: it gave t1 zero.
    trajs = read_jsonl(run / "trajectories.jsonl")
    for t in trajs:
        if t["task"]["task_id"] == "t1":
            t["reward"], t["reward_components"] = 0.0, {"correct": 0.0}
    write_jsonl(run / "trajectories.jsonl", trajs)

    out = tmp_path / "fixed"
    rc, stdout, stderr = run_cli("eval", "reverify", run, "--out", out)
    assert rc == 0, stderr
    report = report_of(out)
    changed = report["reverify"]["changed"]
    assert sorted((c["task_id"], c["sample_index"], c["old_reward"], c["new_reward"]) for c in changed) == [
        ("t1", 0, 0.0, 1.0),
        ("t1", 1, 0.0, 1.0),
    ]
    assert report["reverify"]["modes"] == {"math": "answer"} and report["reverify"]["errors"] == []
    assert report["envs"]["math"]["pass@1"]["value"] == pytest.approx(0.6)
    assert "2 samples changed reward" in stdout and "math/t1 #0: 0.0 -> 1.0" in stdout
    assert report["config"]["k"] == 2 and report["model"]["name"] == "rollgate-tiny"


def wordle_rows(n: int) -> list[dict]:
    rows = example_rows("wordle", n)
    for r in rows:  # play the gold guesses
        script = [{"call": c} for c in r["gold"]["calls"]] + [{"text": r["gold"]["response"]}]
        r["responses_create_params"]["metadata"] = {"rollgate_script": json.dumps(script)}
    return rows


def test_replay_reproduces_rewards_and_refuses_a_diverged_replay(run_cli, tmp_path):
    run = evaluate(run_cli, tmp_path, wordle_rows(3), "wordle", k=1)
    before = {s["task_id"]: s["reward"] for s in read_jsonl(run / "samples.jsonl")}
    assert all(r > 0 for r in before.values())  # the gold guesses solve every game

    rc, _, stderr = run_cli("eval", "reverify", run, "--out", tmp_path / "same")
    assert rc == 0, stderr
    report = report_of(tmp_path / "same")
    assert report["reverify"]["modes"] == {"wordle": "replay"}
    assert report["reverify"]["changed"] == [] and report["reverify"]["errors"] == []
    assert {s["task_id"]: s["reward"] for s in read_jsonl(tmp_path / "same" / "samples.jsonl")} == before

    # A stored tool output that today's environment does not reproduce: never scored, reported.
    trajs = read_jsonl(run / "trajectories.jsonl")
    victim = trajs[0]
    out_item = next(m for m in victim["messages"] if m.get("type") == "function_call_output")
    out_item["output"] = "guess 1/6: XXXXX -> ....."
    write_jsonl(tmp_path / "tampered.jsonl", trajs)
    rc, _, stderr = run_cli("eval", "reverify", tmp_path / "tampered.jsonl", "--out", tmp_path / "tampered")
    assert rc == 0
    report = report_of(tmp_path / "tampered")
    [error] = report["reverify"]["errors"]
    assert error["task_id"] == victim["task"]["task_id"] and "differently on replay" in error["error"]
    assert report["envs"]["wordle"]["failed_samples"] == 1 and "could not be re-verified" in stderr


def test_an_environment_that_cannot_be_reverified_is_refused_by_name(run_cli, tmp_path, monkeypatch):
    run = evaluate(run_cli, tmp_path, [math_row("t0", 1, 1)], "math", k=1)
    # No shipped environment declares "never" today: flip math's declaration for this test.
    monkeypatch.setattr(MathEnv, "reverify", "never")
    rc, _, stderr = run_cli("eval", "reverify", run, "--out", tmp_path / "out")
    assert rc == 2
    assert "'math' cannot be re-verified" in stderr and "(field env)" in stderr
    assert not (tmp_path / "out" / "report.json").exists()


def test_a_trajectory_file_of_an_unknown_schema_version_is_refused(run_cli, tmp_path):
    run = evaluate(run_cli, tmp_path, [math_row("t0", 1, 1)], "math", k=1)
    [traj] = read_jsonl(run / "trajectories.jsonl")
    traj["schema_version"] = 99
    path = write_jsonl(tmp_path / "future.jsonl", [traj])
    rc, _, stderr = run_cli("eval", "reverify", path, "--out", tmp_path / "out")
    assert rc == 2
    assert "schema_version 99 is not a trajectory schema" in stderr and "(field schema_version)" in stderr
    assert jsonutil.loads(path.read_bytes())["schema_version"] == 99
