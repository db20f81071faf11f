"""`rollgate eval` end to end with the scripted model backend, on tasks whose correct rate is
known by construction (conftest.math_row): the reported pass@1, pass@k, majority@k, mean reward,
tag breakdowns and failure counts must equal the exact values. In process (the embedded stack)
and against a real gateway over loopback HTTP."""

from __future__ import annotations

import pytest

from rollgate.core import jsonutil
from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings
from tests.evaluation.conftest import SCRIPTED, math_row, read_jsonl, report_of, write_jsonl

K = 4


def known_tasks() -> list[dict]:
    """10 graded tasks, 6 answered right (5 'easy' all right, 1 of 5 'hard'), and one task whose
    row cannot be seeded (an env_error on every sample: a failure, never a wrong answer)."""
    rows = []
    for i in range(10):
        right = i < 6
        rows.append(
            math_row(
                f"t{i}",
                i,
                7,
                None if right else str(i + 100),
                category="easy" if i < 5 else "hard",
                calc=i % 2 == 0,
            )
        )
    broken = math_row("broken", 1, 1, category="broken")
    broken["expected_answer"] = "(((not an expression"
    return [*rows, broken]


def check_known_report(report: dict) -> None:
    block = report["envs"]["math"]
    assert block["tasks"] == 11 and block["samples"] == 44
    assert block["failed_samples"] == 4 and block["failures"] == {"env_error": 4}
    assert block["tasks_short_of_k"] == 1 and block["tasks_without_valid_samples"] == 1
    # Exact by construction: every sample of a right task is correct, none of a wrong one.
    for metric in ("mean_reward", "pass@1", "pass@2", f"pass@{K}", f"majority@{K}"):
        assert block[metric]["value"] == pytest.approx(0.6), metric
        assert block[metric]["tasks"] == 10, metric
        lo, hi = block[metric]["ci"]
        assert lo < 0.6 < hi
    assert block["majority_available"] is True
    tags = block["by_tag"]["category"]
    assert tags["easy"]["pass@1"]["value"] == 1.0 and tags["easy"]["tasks"] == 5
    assert tags["hard"]["pass@1"]["value"] == pytest.approx(0.2)
    assert tags["broken"]["pass@1"] is None  # no valid sample: no estimate, not a zero
    assert report["overall"]["pass@1"]["value"] == pytest.approx(0.6)
    assert report["model"]["name"] == "rollgate-tiny"
    assert report["model"]["policy_version"] == "p7"
    assert report["config"]["threshold"] == 1.0


def test_eval_reports_exact_pass_at_k_on_known_tasks(run_cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", known_tasks())
    out = tmp_path / "run"
    rc, stdout, stderr = run_cli(
        "eval", "--env", "math", "--tasks", tasks, "--k", K, "--out", out, "--policy-version", "p7", *SCRIPTED
    )
    assert rc == 0, stderr
    check_known_report(report_of(out))
    assert "0.600 [" in stdout and "math" in stdout and "overall" in stdout
    samples = read_jsonl(out / "samples.jsonl")
    assert len(samples) == 44
    first = next(s for s in samples if s["task_id"] == "t0" and s["sample_index"] == 0)
    assert (first["outcome"], first["reward"], first["answer"]) == ("completed", 1.0, "7")
    wrong = next(s for s in samples if s["task_id"] == "t9")
    assert (wrong["reward"], wrong["answer"]) == (0.0, "109")
    failed = [s for s in samples if s["task_id"] == "broken"]
    assert {s["outcome"] for s in failed} == {"env_error"} and all("reward" not in s for s in failed)
    assert (out / "report.html").read_text().count('<tr data-env="math">') == 1


def test_too_many_failures_exit_nonzero_and_resume_reruns_only_what_is_missing(run_cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", known_tasks())
    out = tmp_path / "run"
    common = ("eval", "--env", "math", "--tasks", tasks, "--out", out, "--policy-version", "p7", *SCRIPTED)
    args = (*common, "--k", K)
    rc, _, stderr = run_cli(*args, "--max-failure-fraction", "0.05")
    assert rc == 3, stderr  # 4 of 44 samples failed: 9%, above 5%
    assert "above --max-failure-fraction" in stderr
    assert report_of(out)["failure_check"]["passed"] is False

    # A crash: the last samples are lost and the final line is torn mid-write.
    lines = (out / "samples.jsonl").read_bytes().splitlines(keepends=True)
    kept = [x for x in lines if b'"outcome":"completed"' in x][:30]
    (out / "samples.jsonl").write_bytes(b"".join(kept) + b'{"schema_version":1,"env":"ma')
    kept_ids = {jsonutil.loads(x)["trajectory_id"] for x in kept}

    rc, _, stderr = run_cli(*args)
    assert rc == 2 and "--resume" in stderr  # an existing run is never silently overwritten

    rc, _, stderr = run_cli(*args, "--resume")
    assert rc == 0, stderr
    samples = read_jsonl(out / "samples.jsonl")
    assert len(samples) == 30 + 14  # 10 valid samples missing + 4 failed re-run
    assert kept_ids <= {s["trajectory_id"] for s in samples}
    check_known_report(report_of(out))

    rc, _, stderr = run_cli(*common, "--k", 2, "--resume")  # another --k
    assert rc == 2 and "field --k" in stderr


@pytest.fixture(scope="module")
def scripted_gateway():
    from rollgate.stack.embedded import build_app

    settings = Settings(model={"backend": "scripted"}, envs=["math"], gateway={"ui": False})
    with serve_in_thread(build_app(settings), timeout_s=120) as url:
        yield url


def test_eval_against_a_gateway_reports_the_same_exact_values(run_cli, tmp_path, scripted_gateway):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", known_tasks())
    out = tmp_path / "run"
    rc, _, stderr = run_cli(
        "eval", "--env", "math", "--tasks", tasks, "--k", K, "--out", out, "--policy-version", "p7",
        "--gateway", scripted_gateway, "--no-progress",
    )  # fmt: skip
    assert rc == 0, stderr
    check_known_report(report_of(out))
    samples = read_jsonl(out / "samples.jsonl")
    assert sorted((s["task_id"], s["sample_index"]) for s in samples if s["task_id"] == "t3") == [
        ("t3", i) for i in range(K)
    ]
