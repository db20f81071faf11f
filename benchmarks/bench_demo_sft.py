"""Does the demo policy's SFT learn on any machine? The `tiny-math-demo` recipe's SFT phase trained
from several slightly different starts, each scored greedily on held-out math tasks.

    python -m benchmarks.bench_demo_sft                                 # the recipe as it ships
    python -m benchmarks.bench_demo_sft --set warmup_steps=20 --starts 8

Another machine rounds floats differently (another instruction set or kernel library), and the
tiny model's SFT amplifies a last-bit difference into another model: whether it learns to copy the
calculator's output into its answer, and so scores 0.05 or 0.6, depended on where it started. A
build on one machine is deterministic (here the thread count changed nothing either: 0.0752 final
loss at one thread and at two), so one build says nothing about another machine's. This benchmark
stands in for other machines by other last bits: start k multiplies every initial weight by
(1 + eps * N(0, 1)) with noise seed k (start 0 is the recipe's own initial model, unchanged) and
trains on the same demonstrations in the same order. Each start's checkpoint is then scored as the
shipped policy's held-out check is (docs/trainers/recipes.md): `rollgate eval --model-path DIR
--env math --split eval --n 100 --seed 7 --k 1 --temperature 0 --max-output-tokens 96 --max-turns
4`, its mean greedy reward with the 95% interval.

The demonstrations are those `rollgate demo --rebuild` trains on (the demo's example rows
excluded). `--set KEY=VALUE` changes an SFT setting of the recipe (learning_rate, epochs,
batch_size, warmup_steps) for every start; `--lanes` starts train side by side, one thread each.
Results: `benchmarks/results/bench_demo_sft.json` for the recipe as it ships, with `_<key>-<value>`
appended for each `--set`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from benchmarks import cli, common

# the SFT settings --set may change, each with the benchmarks' own parser of its range
SFT_KEYS = {
    "learning_rate": cli.positive(),
    "epochs": cli.positive(),
    "batch_size": cli.at_least(1),
    "warmup_steps": cli.at_least(0),
}
# the README's held-out check of the shipped policy
EVAL_ARGS = ("--env", "math", "--split", "eval", "--n", "100", "--seed", "7", "--k", "1", "--temperature", "0")
EVAL_BUDGET = ("--max-output-tokens", "96", "--max-turns", "4", "--no-progress")
LEARNED = 0.25  # a start "learned" when its held-out greedy reward reaches this (the shipped policy: 0.33)


def sft_setting(text: str) -> tuple[str, float]:
    """`--set KEY=VALUE`: an SFT setting of the recipe and its value, checked where it is parsed."""
    key, sep, value = text.partition("=")
    if not sep or key not in SFT_KEYS:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with KEY one of {', '.join(SFT_KEYS)}, got {text!r}")
    try:
        return key, SFT_KEYS[key](value)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{key} {e}") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = cli.parser(__doc__, whole_doc=True)
    p.add_argument("--starts", type=cli.COUNT, default=8, help="perturbed starts (start 0 is unperturbed)")
    p.add_argument("--eps", type=cli.positive(), default=1e-6, help="relative size of the perturbation")
    p.add_argument("--lanes", type=cli.COUNT, default=2, help="starts trained side by side (one thread each)")
    p.add_argument("--set", dest="settings", type=sft_setting, action="append", default=[], metavar="KEY=VALUE")
    return p.parse_args(argv)


def recipe(settings: list[tuple[str, float]]):
    from rollgate.commands.demo import DEMO_RECIPE
    from rollgate.trainer_adapters.recipes import get_recipe

    cfg = get_recipe(DEMO_RECIPE)
    return dataclasses.replace(cfg, sft=dataclasses.replace(cfg.sft, **dict(settings)))


def prepare(cfg, work: Path) -> tuple[Path, Path]:
    """The demonstrations `rollgate demo --rebuild` trains on, tokenized, and the recipe's initial
    model: (examples file, init dir)."""
    from rollgate.commands.demo import demo_exclusions, examples_dir
    from rollgate.trainer_adapters.recipes.demo_model import demonstrations

    src = examples_dir(None)
    if src is None:
        raise SystemExit("no examples/ directory: run this from a source checkout")
    (work / "gold").mkdir(parents=True)
    examples, init = demonstrations(cfg, work / "gold", set(demo_exclusions(src)), print)
    path = work / "examples.json"
    path.write_text(json.dumps(examples))
    return path, init


def train_start(cfg, start: int, eps: float, examples_file: Path, init: Path, out: Path) -> dict[str, Any]:
    """One start: perturb, SFT on one thread, save, score greedily on the held-out tasks."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollgate.trainer_adapters.recipes.sft_phase import train_sft

    examples = [tuple(e) for e in json.loads(examples_file.read_text())]
    model, tok = AutoModelForCausalLM.from_pretrained(init), AutoTokenizer.from_pretrained(init)
    if start:
        noise = torch.Generator().manual_seed(start)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1 + eps * torch.randn(p.shape, generator=noise))
    losses: list[float] = []
    started = time.perf_counter()
    torch.set_num_threads(1)  # a lane's own core
    result = train_sft(model, examples, cfg.sft, pad_id=tok.pad_token_id, seed=cfg.seed, on_step=_keep(losses))
    seconds = time.perf_counter() - started
    model.save_pretrained(out)
    tok.save_pretrained(out)
    report = out / "eval"
    cmd = [sys.executable, "-m", "rollgate.cli", "eval", "--model-path", str(out), *EVAL_ARGS, *EVAL_BUDGET]
    subprocess.run([*cmd, "--out", str(report)], check=True, capture_output=True)
    mean = json.loads((report / "report.json").read_text())["overall"]["mean_reward"]
    tail = losses[-50:]
    return {
        "start": start,
        "steps": result.steps,
        "loss_last_50_steps": round(statistics.fmean(tail), 4),
        "greedy_reward": mean["value"],
        "ci": [round(c, 3) for c in mean["ci"]],
        "train_s": round(seconds, 1),
    }


def _keep(losses: list[float]):
    def on_step(_step: int, loss: float) -> None:
        losses.append(loss)

    return on_step


def results_name(settings: list[tuple[str, float]]) -> str:
    return "bench_demo_sft" + "".join(f"_{k}-{v:g}" for k, v in settings)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    rewards = [r["greedy_reward"] for r in rows]
    return {
        "starts": len(rows),
        "mean": round(statistics.fmean(rewards), 3),
        "min": min(rewards),
        "max": max(rewards),
        f"learned (>= {LEARNED})": sum(r >= LEARNED for r in rewards),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    cfg = recipe(args.settings)
    with tempfile.TemporaryDirectory(prefix="bench_demo_sft.") as tmp:
        work = Path(tmp)
        examples, init = prepare(cfg, work)
        with ProcessPoolExecutor(max_workers=args.lanes, mp_context=get_context("spawn")) as pool:
            futures = [
                pool.submit(train_start, cfg, k, args.eps, examples, init, work / f"start-{k}")
                for k in range(args.starts)
            ]
            rows = []
            for f in futures:
                rows.append(f.result())
                print(json.dumps(rows[-1]), flush=True)
    common.print_table(rows, ["start", "steps", "loss_last_50_steps", "greedy_reward", "ci", "train_s"])
    result = summary(rows)
    print(json.dumps(result))
    path = common.write_results(
        results_name(args.settings),
        {"sft": dataclasses.asdict(cfg.sft), "eps": args.eps, "lanes": args.lanes, "summary": result, "starts": rows},
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
