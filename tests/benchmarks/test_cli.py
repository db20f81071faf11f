"""The benchmarks' shared flags (benchmarks/cli.py): every benchmark's parser builds, and a bad
count, duration or list is refused where it is parsed, naming the flag and why, before any server
or model starts."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import sys
from pathlib import Path

import pytest

from benchmarks import cli

ROOT = Path(__file__).resolve().parents[2]
# Every benchmark with a command line (standins and the naive stack are servers the others start).
BENCHMARKS = sorted(p.stem for p in (ROOT / "benchmarks").glob("bench_*.py"))


def run_main(name: str, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """The benchmark's main() with `argv`; returns argparse's exit code (it must exit at parsing)."""
    module = importlib.import_module(f"benchmarks.{name}")
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *argv])
    params = inspect.signature(module.main).parameters
    with pytest.raises(SystemExit) as done:
        result = module.main(argv) if params else module.main()
        if inspect.iscoroutine(result):
            asyncio.run(result)
    return done.value.code


@pytest.mark.parametrize("name", BENCHMARKS)
def test_every_benchmark_parser_builds_and_documents_its_flags(name, monkeypatch, capsys):
    assert run_main(name, ["--help"], monkeypatch) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:") and "--help" in out


@pytest.mark.parametrize(
    ("name", "argv", "message"),
    [
        ("bench_proxy", ["--repeats", "0"], "argument --repeats: must be >= 1, got 0"),
        ("bench_cluster", ["--concurrency", "64,0"], "argument --concurrency: expected integers >= 1, got '64,0'"),
        ("bench_overhead", ["--seconds", "0"], "argument --seconds: must be > 0, got 0"),
        ("bench_soak", ["--result-ttl-s", "5"], "argument --result-ttl-s: must be >= 10, got 5"),
        ("bench_model_server", ["--threads", "two"], "argument --threads: expected an integer, got 'two'"),
        ("bench_tool_choice", ["--tokens", "8"], "argument --tokens: must be >= 16, got 8"),
        ("bench_grpo_snr", ["--run", "x", "--batches", "1"], "argument --batches: must be >= 2, got 1"),
        ("bench_grpo_snr", ["--run", "x", "--trainable", "top:0"], "argument --trainable: --trainable must be one of"),
        ("bench_real_model", ["--kv-rounds", "-1"], "argument --kv-rounds: must be >= 0, got -1"),
        ("bench_demo_sft", ["--set", "foo=1"], "argument --set: expected KEY=VALUE with KEY one of learning_rate"),
        ("bench_demo_sft", ["--set", "epochs=0"], "argument --set: epochs must be > 0, got 0"),
        ("bench_demo_sft", ["--set", "batch_size=0"], "argument --set: batch_size must be >= 1, got 0"),
        ("bench_demo_sft", ["--set", "warmup_steps=-1"], "argument --set: warmup_steps must be >= 0, got -1"),
        ("bench_async_rl", ["--out", "x", "--compare", "speed"], "argument --compare: invalid choice: 'speed'"),
        ("bench_async_rl", ["--out", "x", "--screen-tasks", "-1"], "argument --screen-tasks: must be >= 0, got -1"),
        ("bench_async_rl", ["--out", "x", "--generation", "gpu"], "argument --generation: invalid choice: 'gpu'"),
        (
            "bench_async_rl",
            ["--out", "x", "--compare", "generation", "--generation", "vllm"],
            "--generation sets both runs' generation for --compare mode",
        ),
    ],
)
def test_a_bad_flag_is_refused_naming_the_flag_and_why(name, argv, message, monkeypatch, capsys):
    assert run_main(name, argv, monkeypatch) == 2
    assert message in capsys.readouterr().err


def test_the_redis_url_defaults_to_the_benchmark_variable(monkeypatch):
    monkeypatch.setenv(cli.REDIS_URL_ENV, "redis://127.0.0.1:6379/7")
    p = cli.parser("doc")
    cli.add_redis_url(p, "Redis")
    assert p.parse_args([]).redis_url == "redis://127.0.0.1:6379/7"
    monkeypatch.delenv(cli.REDIS_URL_ENV)
    p = cli.parser("doc")
    cli.add_redis_url(p, "Redis")
    assert p.parse_args([]).redis_url == cli.DEFAULT_REDIS_URL
    p = cli.parser("doc")
    cli.add_redis_url(p, "an external Redis", default="")
    assert p.parse_args([]).redis_url == ""


def test_model_flags_and_lists_parse_to_values():
    p = cli.parser("First paragraph.\n\nThe rest.")
    assert p.description == "First paragraph."
    cli.add_model_flags(p, device="cpu", threads=2)
    p.add_argument("--levels", type=cli.int_list, default=[1])
    a = p.parse_args(["--levels", "1,64,256", "--model", "/m"])
    assert (a.levels, a.device, a.threads, a.model) == ([1, 64, 256], "cpu", 2, "/m")
    assert cli.model_dir(a.model) == "/m"


def test_a_result_names_the_module_that_ran_and_hides_the_home_directory(monkeypatch, tmp_path):
    from benchmarks import common

    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path))
    script = str(Path(common.__file__).with_name("bench_grpo_snr.py"))
    monkeypatch.setattr("sys.argv", [script, "--model", f"{tmp_path}/models/m", "--batches", "6"])
    command = common.run_command("bench_grpo_snr_6x8x8")
    assert command.split()[1:] == ["-m", "benchmarks.bench_grpo_snr", "--model", "~/models/m", "--batches", "6"]


def test_the_async_bench_runs_both_modes_on_the_generation_asked_for():
    from benchmarks import bench_async_rl as b

    args = b.parse_args(["--out", "x", "--generation", "vllm"])
    assert b.variants(args) == [
        ("sync", {"mode": "sync", "generation": "vllm"}),
        ("async", {"mode": "async", "generation": "vllm"}),
    ]
    assert b.results_name(args) == "bench_async_rl_vllm"
    args = b.parse_args(["--out", "x"])
    assert [g["generation"] for _, g in b.variants(args)] == ["local", "local"] and b.results_name(
        args
    ) == "bench_async_rl"
    args = b.parse_args(["--out", "x", "--compare", "generation"])
    assert b.variants(args) == [
        ("local", {"mode": "sync", "generation": "local"}),
        ("vllm", {"mode": "sync", "generation": "vllm"}),
    ]
    assert b.results_name(args) == "bench_grpo_generation"


def test_the_demo_sft_bench_trains_the_demo_recipe_with_the_settings_asked_for():
    from benchmarks import bench_demo_sft as b
    from rollgate.trainer_adapters.recipes import get_recipe

    shipped = get_recipe("tiny-math-demo")
    args = b.parse_args([])
    assert b.recipe(args.settings) == shipped and b.results_name(args.settings) == "bench_demo_sft"
    args = b.parse_args(["--set", "warmup_steps=20", "--set", "learning_rate=2e-3"])
    cfg = b.recipe(args.settings)
    assert (cfg.sft.warmup_steps, cfg.sft.learning_rate, cfg.sft.epochs) == (20, 2e-3, shipped.sft.epochs)
    assert cfg.shape == shipped.shape and cfg.train_tasks == shipped.train_tasks
    assert b.results_name(args.settings) == "bench_demo_sft_warmup_steps-20_learning_rate-0.002"
    rows = [{"greedy_reward": r} for r in (0.05, 0.35, 0.6)]
    assert b.summary(rows) == {"starts": 3, "mean": 0.333, "min": 0.05, "max": 0.6, "learned (>= 0.25)": 2}
