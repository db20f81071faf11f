"""Bad input to `rollgate eval`: each case is refused before any rollout, with exit status 2 and
a message that names the field (the flag, or the row field)."""

from __future__ import annotations

import pytest

from rollgate.core import jsonutil
from tests.evaluation.conftest import SCRIPTED, math_row, read_jsonl, report_of, write_jsonl


@pytest.fixture
def tasks(tmp_path):
    return write_jsonl(tmp_path / "tasks.jsonl", [math_row(f"t{i}", i, 1) for i in range(3)])


def refused(run_cli, *args) -> str:
    rc, _, stderr = run_cli(*args)
    assert rc == 2, stderr
    return stderr


def test_unknown_environment(run_cli, tasks, tmp_path):
    err = refused(run_cli, "eval", "--env", "chess", "--tasks", tasks, "--k", 2, "--out", tmp_path / "o", *SCRIPTED)
    assert "unknown environment 'chess'" in err and "(field --env)" in err
    assert not (tmp_path / "o").exists()


def test_k_larger_than_the_number_of_samples(run_cli, tasks, tmp_path):
    err = refused(
        run_cli, "eval", "--env", "math", "--tasks", tasks, "--k", 4, "--pass-k", "1,8", "--out", tmp_path / "o"
    )
    assert "k=8 is larger than the number of samples per task (--k 4)" in err and "(field --pass-k)" in err


@pytest.mark.parametrize("threshold", ["1.5", "0", "-1"])
def test_threshold_outside_the_reward_range(run_cli, tasks, tmp_path, threshold):
    err = refused(
        run_cli, "eval", "--env", "math", "--tasks", tasks, "--k", 2, "--threshold", threshold, "--out", tmp_path / "o"
    )
    assert "outside the reward range of 'math'" in err and "(field --threshold)" in err


def test_compare_of_reports_with_no_task_in_common(run_cli, tmp_path):
    dirs = []
    for name in ("a", "b"):
        rows = [math_row(f"{name}{i}", i, 1) for i in range(3)]
        t = write_jsonl(tmp_path / f"{name}.jsonl", rows)
        rc, _, stderr = run_cli("eval", "--env", "math", "--tasks", t, "--k", 1, "--out", tmp_path / name, *SCRIPTED)
        assert rc == 0, stderr
        dirs.append(tmp_path / name)
    err = refused(run_cli, "eval", "compare", *dirs)
    assert "have no task in common" in err and "(field A, B)" in err


def test_compare_of_a_directory_that_is_no_evaluation(run_cli, tmp_path):
    err = refused(run_cli, "eval", "compare", tmp_path, tmp_path)
    assert "not an evaluation directory" in err and "(field A)" in err


def test_rows_the_task_file_cannot_hold(run_cli, tmp_path):
    dup = write_jsonl(tmp_path / "dup.jsonl", [math_row("same", 1, 1), math_row("same", 2, 2)])
    err = refused(run_cli, "eval", "--env", "math", "--tasks", dup, "--k", 1, "--out", tmp_path / "o")
    assert "task_id 'same' of math appears on lines 1 and 2" in err and "(field task_id)" in err

    bad = write_jsonl(tmp_path / "bad.jsonl", [{"responses_create_params": {}, "env": "math"}])
    err = refused(run_cli, "eval", "--env", "math", "--tasks", bad, "--k", 1, "--out", tmp_path / "o")
    assert "responses_create_params" in err and "(field bad.jsonl:1.responses_create_params" in err

    err = refused(run_cli, "eval", "--env", "math", "--tasks", tmp_path / "nope.jsonl", "--k", 1, "--out", tmp_path)
    assert "no such file" in err and "(field --tasks)" in err


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--n", "5"), "--seed"),  # generated tasks must be reproducible
        (("--tasks", "x.jsonl", "--n", "5", "--seed", "1"), "--tasks"),  # one source of tasks
        (("--tasks", "x.jsonl", "--k", "0"), "--k"),
        (("--tasks", "x.jsonl", "--max-failure-fraction", "1.5"), "--max-failure-fraction"),
        (("--tasks", "x.jsonl", "--strict"), "--strict"),
        (("--tasks", "x.jsonl", "--pass-k", "1,two"), "--pass-k"),
    ],
)
def test_flags_that_contradict_each_other(run_cli, tmp_path, args, field):
    base = {"--k": "2"}
    flags = list(args) + [x for k, v in base.items() if k not in args for x in (k, v)]
    err = refused(run_cli, "eval", "--env", "math", "--out", tmp_path / "o", *flags)
    assert f"(field {field})" in err


def test_train_overlap_warns_and_strict_refuses(run_cli, tmp_path):
    rows = [math_row(f"t{i}", i, 1) for i in range(4)]
    tasks = write_jsonl(tmp_path / "tasks.jsonl", rows)
    # The training file numbers the same task differently and carries no env: still the same content.
    train_row = {k: v for k, v in math_row("train-77", 2, 1).items() if k != "env"}
    train = write_jsonl(tmp_path / "train.jsonl", [train_row, math_row("other", 50, 50)])
    args = ("eval", "--env", "math", "--tasks", tasks, "--k", 1, "--train-tasks", train, *SCRIPTED)

    err = refused(run_cli, *args, "--strict", "--out", tmp_path / "strict")
    assert "1 eval task(s) also appear in --train-tasks" in err and "math/t2" in err and "(field --train-tasks)" in err
    assert not (tmp_path / "strict" / "samples.jsonl").exists()

    rc, _, stderr = run_cli(*args, "--out", tmp_path / "warn")
    assert rc == 0 and "warning: 1 eval task(s) also appear in --train-tasks" in stderr
    assert report_of(tmp_path / "warn")["train_overlap"]["tasks"] == ["math/t2"]
    assert len(read_jsonl(tmp_path / "warn" / "samples.jsonl")) == 4


def test_a_samples_file_of_an_unknown_schema_version_is_refused(run_cli, tmp_path, tasks):
    out = tmp_path / "o"
    rc, _, stderr = run_cli("eval", "--env", "math", "--tasks", tasks, "--k", 1, "--out", out, *SCRIPTED)
    assert rc == 0, stderr
    lines = read_jsonl(out / "samples.jsonl")
    lines[0]["schema_version"] = 7
    (out / "samples.jsonl").write_bytes(b"".join(jsonutil.dumps(x) + b"\n" for x in lines))
    err = refused(run_cli, "eval", "--env", "math", "--tasks", tasks, "--k", 1, "--out", out, *SCRIPTED, "--resume")
    assert "schema_version 7 is not a samples schema" in err and "(field schema_version)" in err


def test_an_unreachable_gateway_is_reported_without_a_progress_bar_around_it(run_cli, tasks, tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, _, err = run_cli(
        "eval",
        "--env",
        "math",
        "--tasks",
        tasks,
        "--k",
        1,
        "--out",
        tmp_path / "o",
        "--gateway",
        f"http://127.0.0.1:{port}",
    )
    assert rc != 0 and f"cannot reach the gateway at http://127.0.0.1:{port}" in err
    assert f"start one with `rollgate serve --port {port}`" in err
    assert "sample/s" not in err and "it/s" not in err  # no bar was drawn before the tasks were known
