"""Synchronous against asynchronous GRPO in the same run: wall time per step and the final
held-out reward of each.

    python -m benchmarks.bench_async_rl --out runs/bench-async-rl              # tiny-math, 10 steps x 2 rounds
    python -m benchmarks.bench_async_rl --out runs/bench-async-rl --steps 20 --rounds 3 --max-staleness 2
    python -m benchmarks.bench_async_rl --out runs/tiny-math --from-run --steps 10   # from a `rollgate train` run's SFT

The recipe's phases before GRPO (data, the model, SFT) run once (`--out` keeps them: a re-run with
the same directory and settings goes on from there). Then GRPO runs from the same post-SFT
checkpoint in each mode, alternating (sync, async, sync, async, ...), so both see the same machine
load: sync generates each step's rollouts with the weights being trained and then trains; async
(rollgate.trainer_adapters.async_rl) collects step N+1's rollouts while step N trains, at most
`--max-staleness` policy versions behind, pushing the weights into the served copy after each
optimizer step. A step's wall time is from the end of the previous step to the end of this one
(held-out evaluation is only at the end of a run, outside every step). Each run's final policy is
evaluated on the recipe's held-out tasks the same way (`rollgate eval`, fixed sampling seed)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import cli, common


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = cli.parser(__doc__, whole_doc=True)
    p.add_argument("--recipe", default="tiny-math")
    p.add_argument("--out", required=True, help="working directory (the recipe's data and SFT are kept there)")
    p.add_argument(
        "--from-run",
        action="store_true",
        help="--out is a finished `rollgate train` run of the recipe: start from its post-SFT checkpoint as it is",
    )
    p.add_argument("--steps", type=cli.COUNT, default=10, help="GRPO steps of each run")
    p.add_argument("--rounds", type=cli.COUNT, default=2, help="runs of each mode, alternating")
    p.add_argument(
        "--max-staleness", type=cli.at_least(0), default=1, help="async: policy versions of staleness allowed"
    )
    p.add_argument("--train-tasks", type=cli.COUNT, help="override the recipe's (a shorter run)")
    p.add_argument("--heldout-tasks", type=cli.COUNT, help="override the recipe's")
    p.add_argument("--sft-epochs", type=cli.positive(), help="override the recipe's")
    p.add_argument("--prompts-per-step", type=cli.COUNT, help="override the recipe's")
    return p.parse_args(argv)


def recipe(args: argparse.Namespace):
    from rollgate.trainer_adapters.recipes import get_recipe

    cfg = get_recipe(args.recipe)
    top = {"train_tasks": args.train_tasks, "heldout_tasks": args.heldout_tasks}
    cfg = dataclasses.replace(cfg, **{k: v for k, v in top.items() if v is not None})
    # SFT is measured once, at its end (the curve's intermediate points are not this benchmark's)
    sft = {"eval_every": 0, **({"epochs": args.sft_epochs} if args.sft_epochs is not None else {})}
    cfg = dataclasses.replace(cfg, sft=dataclasses.replace(cfg.sft, **sft))
    grpo = {"steps": args.steps, "eval_every": 0, "max_staleness": args.max_staleness}
    if args.prompts_per_step is not None:
        grpo["prompts_per_step"] = args.prompts_per_step
    return dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, **grpo))


def one_run(cfg, mode: str, label: str, sft: Path, out: Path, evaluate) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollgate.trainer_adapters.recipes.data import read_rows
    from rollgate.trainer_adapters.recipes.grpo_phase import train_grpo

    cfg = dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, mode=mode))
    model, tok = AutoModelForCausalLM.from_pretrained(sft), AutoTokenizer.from_pretrained(sft)
    rows = read_rows(out / "data" / "train_tasks.jsonl")
    work = out / "bench" / label
    shutil.rmtree(work, ignore_errors=True)
    started = time.perf_counter()
    result = train_grpo(cfg, model, tok, rows, work / "grpo")
    wall = time.perf_counter() - started
    model.save_pretrained(work / "model")
    tok.save_pretrained(work / "model")
    measured = evaluate(work / "model", f"bench-{label}")
    steps = result.step_seconds
    stats = result.async_stats or {}
    return {
        "run": label,
        "mode": mode,
        "steps": result.steps,
        "s_per_step": round(statistics.mean(steps), 2),
        "median_s_per_step": round(statistics.median(steps), 2),
        # the first step collects its rollouts when asked in both modes (nothing to prefetch yet)
        "steady_s_per_step": round(statistics.mean(steps[1:]), 2) if len(steps) > 1 else None,
        "step_seconds": steps,
        "grpo_wall_s": round(wall, 1),
        "heldout_reward": round(measured.reward, 3),
        "heldout_ci": measured.ci,
        "train_reward_last": round(result.train_reward[-1], 3) if result.train_reward else None,
        "stale_dropped": stats.get("dropped_stale", 0),
        "prefetched": stats.get("batches_prefetched", 0),
        "prefetch_misses": stats.get("prefetch_misses", 0),
        "staleness_histogram": stats.get("staleness_histogram"),
    }


def summary(runs: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    mine = [r for r in runs if r["mode"] == mode]
    steps = [s for r in mine for s in r["step_seconds"]]
    steady = [s for r in mine for s in r["step_seconds"][1:]]
    return {
        "run": f"{mode} (all)",
        "mode": mode,
        "steps": sum(r["steps"] for r in mine),
        "s_per_step": round(statistics.mean(steps), 2),
        "median_s_per_step": round(statistics.median(steps), 2),
        "steady_s_per_step": round(statistics.mean(steady), 2) if steady else None,
        "grpo_wall_s": round(sum(r["grpo_wall_s"] for r in mine), 1),
        "heldout_reward": round(statistics.mean(r["heldout_reward"] for r in mine), 3),
        "stale_dropped": sum(r["stale_dropped"] for r in mine),
    }


def main(argv: list[str] | None = None) -> int:
    from rollgate.commands.train import HeldoutEvaluator
    from rollgate.trainer_adapters.recipes.runner import RecipeRun

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    common.exit_on_sigterm()
    cfg = recipe(args)
    out = Path(args.out)
    evaluate = HeldoutEvaluator(cfg, out)
    prep = time.perf_counter()
    if args.from_run:
        import json

        curve = json.loads((out / "state.json").read_text())["curve"]
        sft = out / "work" / "sft-model"
    else:  # the phases before GRPO, once (resumed when --out holds them for these settings)
        prepared = RecipeRun(cfg, out, evaluate, resume=(out / "state.json").exists())
        sft = prepared.prepare()
        curve = prepared.state.curve
    prep_s = time.perf_counter() - prep
    sft_reward = [p for p in curve if p["phase"] == "sft"][-1]["reward"]
    runs = []
    for r in range(args.rounds):
        for mode in ("sync", "async"):
            runs.append(one_run(cfg, mode, f"{mode}-{r + 1}", sft, out, evaluate))
            logging.getLogger("bench").info("%s", {k: v for k, v in runs[-1].items() if k != "step_seconds"})
    table = runs + [summary(runs, "sync"), summary(runs, "async")]
    columns = [
        "run",
        "steps",
        "s_per_step",
        "median_s_per_step",
        "steady_s_per_step",
        "grpo_wall_s",
        "heldout_reward",
        "stale_dropped",
    ]
    common.print_table(
        table,
        columns,
        title=f"{cfg.name}: GRPO from the SFT checkpoint (held-out reward {sft_reward:.3f} on {cfg.heldout_tasks} "
        f"tasks), {args.steps} steps x {cfg.grpo.prompts_per_step} prompts x {cfg.grpo.num_generations} samples, "
        f"async max_staleness={args.max_staleness}",
    )
    sync, asyn = summary(runs, "sync"), summary(runs, "async")
    print(f"\nasync / sync time per step: {asyn['s_per_step'] / sync['s_per_step']:.2f}")
    path = common.write_results(
        "bench_async_rl",
        {
            "recipe": cfg.name,
            "config": cfg.as_dict(),
            "prepare_seconds": round(prep_s, 1),
            "sft_heldout_reward": sft_reward,
            "runs": runs,
            "summary": {
                "sync": sync,
                "async": asyn,
                "async_over_sync_s_per_step": asyn["s_per_step"] / sync["s_per_step"],
            },
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
