"""`rollgate collect` end to end against a real embedded gateway (scripted model backend: these
tests are about the collection machinery, not the model)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from rollgate.cli import main
from rollgate.core import jsonutil
from rollgate.core.schemas import FailureRecord, Trajectory
from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings
from tests.gateway.rows import example_rows


def scripted_settings(**kw) -> Settings:
    return Settings(model={"backend": "scripted"}, envs=["math", "wordle"], gateway={"ui": False}, **kw)


@pytest.fixture(scope="module")
def gateway_url():
    from rollgate.stack.embedded import build_app

    with serve_in_thread(build_app(scripted_settings()), timeout_s=120) as url:
        yield url


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_bytes(b"".join((x if isinstance(x, bytes) else jsonutil.dumps(x)) + b"\n" for x in lines))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [jsonutil.loads(x) for x in path.read_bytes().splitlines() if x.strip()]


def test_bad_rows_fail_alone_and_the_rest_are_collected(gateway_url, tmp_path):
    math_a, math_b = example_rows("math", 2)
    [wordle] = example_rows("wordle", 1)
    no_env = {k: v for k, v in math_b.items() if k != "env"}
    tasks = write_jsonl(
        tmp_path / "tasks.jsonl",
        [
            math_a,  # line 1: good
            b"{this is not json",  # line 2
            {"responses_create_params": {}, "env": "math"},  # line 3: no input
            {**math_a, "env": "chess", "task_id": "chess-1"},  # line 4: unknown environment
            b"",  # line 5: blank, ignored
            no_env,  # line 6: good, env from --env
            wordle,  # line 7: good
        ],
    )
    out = tmp_path / "out.jsonl"
    rc = main(
        [
            "collect",
            "--tasks",
            str(tasks),
            "--out",
            str(out),
            "--env",
            "math",
            "--gateway",
            gateway_url,
            "--no-progress",
            "--policy-version",
            "p1",
        ]
    )
    assert rc == 0
    trajs = [Trajectory.model_validate(r) for r in read_jsonl(out)]
    assert sorted(t.task.env for t in trajs) == ["math", "math", "wordle"]
    assert {t.policy.policy_version for t in trajs} == {"p1"}
    failures = [FailureRecord.model_validate(r) for r in read_jsonl(tmp_path / "out.jsonl.failures.jsonl")]
    by_line = {f.line: f.error for f in failures}
    assert sorted(by_line) == [2, 3, 4]
    assert by_line[2].field == "line" and "not valid JSON" in by_line[2].message
    assert by_line[3].field == "responses_create_params" and "input is required" in by_line[3].message
    assert by_line[4].field == "env" and "chess" in by_line[4].message
    assert failures[2].task_id == "chess-1"


def test_rerun_skips_finished_tasks_and_survives_a_torn_last_line(gateway_url, tmp_path):
    rows = [dict(r, task_id=f"m{i}") for i, r in enumerate(example_rows("math", 3))]
    tasks = write_jsonl(tmp_path / "tasks.jsonl", rows)
    out = tmp_path / "out.jsonl"
    args = [
        "collect",
        "--tasks",
        str(tasks),
        "--out",
        str(out),
        "--repeats",
        "2",
        "--gateway",
        gateway_url,
        "--no-progress",
    ]
    assert main(args) == 0
    first = read_jsonl(out)
    assert Counter(r["task"]["task_id"] for r in first) == {"m0": 2, "m1": 2, "m2": 2}
    # Simulate a crash: keep m0's two records, one of m1's, and half of a line.
    keep = [r for r in first if r["task"]["task_id"] == "m0"] + [r for r in first if r["task"]["task_id"] == "m1"][:1]
    out.write_bytes(b"".join(jsonutil.dumps(r) + b"\n" for r in keep) + jsonutil.dumps(first[-1])[:40])
    assert main(args) == 0
    second = read_jsonl(out)  # every line parses: the torn one was cut off
    assert Counter(r["task"]["task_id"] for r in second) == {"m0": 2, "m1": 2, "m2": 2}
    # m0 was not run again: its records are the original ones
    assert {r["trajectory_id"] for r in second if r["task"]["task_id"] == "m0"} == {
        r["trajectory_id"] for r in keep if r["task"]["task_id"] == "m0"
    }
    assert main(args) == 0  # nothing left to do: nothing is added
    assert len(read_jsonl(out)) == 6


def test_collect_without_gateway_runs_the_embedded_stack(tmp_path):
    config = tmp_path / "rollgate.yaml"
    config.write_text(yaml.safe_dump({"model": {"backend": "scripted"}, "envs": ["math"], "gateway": {"ui": False}}))
    tasks = write_jsonl(tmp_path / "tasks.jsonl", example_rows("math", 2))
    out = tmp_path / "out.jsonl"
    assert (
        main(
            [
                "collect",
                "--tasks",
                str(tasks),
                "--out",
                str(out),
                "--config",
                str(config),
                "--concurrency",
                "2",
                "--no-progress",
            ]
        )
        == 0
    )
    trajs = [Trajectory.model_validate(r) for r in read_jsonl(out)]
    assert len(trajs) == 2 and all(t.task.env == "math" for t in trajs)


def test_missing_task_file_is_a_usage_error(tmp_path, capsys):
    assert (
        main(
            [
                "collect",
                "--tasks",
                str(tmp_path / "nope.jsonl"),
                "--out",
                str(tmp_path / "o.jsonl"),
                "--gateway",
                "http://127.0.0.1:9",
            ]
        )
        == 2
    )
    assert "no such file" in capsys.readouterr().err


def test_nemo_gym_rows_are_collected_unchanged(gateway_url, tmp_path):
    import httpx

    tools = httpx.get(f"{gateway_url}/envs/math/tools").json()
    # A row as NeMo Gym data prep writes it: no env, no task_id, tools inline, env fields top-level.
    row = {
        "responses_create_params": {
            "input": [{"role": "user", "content": "What is 3 + 4?"}],
            "tools": tools,
            "temperature": 1.0,
        },
        "expected_answer": "7",
        "dataset": "nemo-gym-style",
    }
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [row])
    out = tmp_path / "out.jsonl"
    assert (
        main(
            [
                "collect",
                "--tasks",
                str(tasks),
                "--out",
                str(out),
                "--env",
                "math",
                "--gateway",
                gateway_url,
                "--no-progress",
            ]
        )
        == 0
    )
    [traj] = [Trajectory.model_validate(r) for r in read_jsonl(out)]
    assert traj.task.row == row and traj.task.env == "math"
    assert traj.outcome.has_reward and traj.reward is not None
    assert any(m.get("type") == "function_call" and m.get("name") == tools[0]["name"] for m in traj.messages)
    assert (
        main(
            [
                "collect",
                "--tasks",
                str(tasks),
                "--out",
                str(out),
                "--env",
                "math",
                "--gateway",
                gateway_url,
                "--no-progress",
            ]
        )
        == 0
    )
    assert len(read_jsonl(out)) == 1  # resume recognises the id-less row by its stable id
