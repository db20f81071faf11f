"""`rollgate eval compare` on real evaluation runs (scripted backend): two runs of the same model
show no difference; a model right on a known half of the tasks is detected as better, and the
reverse as worse."""

from __future__ import annotations

from rollgate.core import jsonutil
from tests.evaluation.conftest import SCRIPTED, math_row, write_jsonl

N_TASKS = 20


def evaluate(run_cli, tmp_path, name: str, right: set[int], k: int = 2):
    rows = [math_row(f"t{i}", i, 3, None if i in right else "999") for i in range(N_TASKS)]
    tasks = write_jsonl(tmp_path / f"{name}.jsonl", rows)
    out = tmp_path / name
    rc, _, stderr = run_cli("eval", "--env", "math", "--tasks", tasks, "--k", k, "--out", out, *SCRIPTED)
    assert rc == 0, stderr
    return out


def test_two_runs_of_the_same_model_show_no_difference(run_cli, tmp_path):
    same = set(range(0, N_TASKS, 3))
    a = evaluate(run_cli, tmp_path, "a", same)
    b = evaluate(run_cli, tmp_path, "b", same)
    rc, stdout, stderr = run_cli("eval", "compare", a, b, "--out", tmp_path / "cmp.json")
    assert rc == 0, stderr
    result = jsonutil.loads((tmp_path / "cmp.json").read_bytes())
    assert result["tasks"]["compared"] == N_TASKS
    for block in (result["envs"]["math"], result["overall"]):
        for metric in ("mean_reward", "pass@1"):
            assert block[metric]["diff"] == 0.0 and block[metric]["p_value"] == 1.0
            assert block[metric]["verdict"] == "no detectable difference"
    assert "no detectable difference" in stdout and "B better" not in stdout


def test_a_model_right_on_a_known_subset_is_detected_both_ways(run_cli, tmp_path):
    a = evaluate(run_cli, tmp_path, "a", set())
    b = evaluate(run_cli, tmp_path, "b", set(range(10)))  # right on exactly t0..t9
    rc, stdout, stderr = run_cli("eval", "compare", a, b, "--out", tmp_path / "cmp.json")
    assert rc == 0, stderr
    m = jsonutil.loads((tmp_path / "cmp.json").read_bytes())["envs"]["math"]["pass@1"]
    assert (m["a"], m["b"], m["diff"]) == (0.0, 0.5, 0.5)
    assert m["ci"][0] > 0 and m["p_value"] < 0.01 and m["verdict"] == "B better"
    assert "B better" in stdout

    rc, stdout, _ = run_cli("eval", "compare", b, a)
    assert rc == 0 and "B worse" in stdout
