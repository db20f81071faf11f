"""A recipe end to end, in phases: data (tasks, gold demonstrations, SFT export), init (the
starting model), before (held-out evaluation), sft, rl, and the outputs: DIR/metrics.json,
DIR/reward_curve.png and the final checkpoint in DIR/model/.

The held-out evaluation is injected (`Evaluator`: a checkpoint directory in, a measurement out),
so this layer never imports rollgate.evaluation, which sits above it. Every evaluation point
evaluates a saved checkpoint the same way: the same tasks, sampling and budgets.

Resume: DIR/state.json records the finished phases and the curve so far; `resume=True` skips the
finished phases and restarts an unfinished one from the previous phase's checkpoint.
"""

from __future__ import annotations

import gc
import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rollgate.core.errors import BadRequest
from rollgate.trainer_adapters.recipes.config import RecipeConfig
from rollgate.trainer_adapters.recipes.data import (
    collect_gold,
    generate_tasks,
    read_rows,
    sft_records,
    template_tools,
    tokenize_records,
    write_rows,
)

log = logging.getLogger("rollgate.train")

PHASES = ("data", "init", "before", "sft", "rl")
STATE_VERSION = 1


@dataclass
class Measurement:
    reward: float
    ci: tuple[float, float] | None = None
    failure_fraction: float = 0.0
    report: str | None = None  # where the evaluation's report directory is


def rl_timing(cfg: RecipeConfig, info: dict[str, Any]) -> dict[str, Any]:
    """The GRPO phase's mode, wall time per step (held-out evaluation excluded) and, when
    asynchronous, how many rollouts were dropped as too stale (never trained on)."""
    steps = info.get("rl_step_seconds") or []
    stats = info.get("rl_async")
    return {
        "rl_mode": cfg.grpo.mode,
        "rl_max_staleness": cfg.grpo.max_staleness if cfg.grpo.mode == "async" else 0,
        "rl_step_seconds": steps,
        "rl_seconds_per_step": round(sum(steps) / len(steps), 3) if steps else None,
        "rl_stale_dropped": stats["dropped_stale"] if stats else 0,
        "rl_async": stats,
        # vLLM generation: each weight push's wall time (checkpoint written, every server reloaded)
        "rl_push_seconds": info.get("rl_push_seconds") or [],
    }


class Evaluator(Protocol):
    # greedy: one sample a task at temperature 0 instead of the recipe's evaluation plan
    def __call__(self, model_dir: Path, label: str, *, greedy: bool = False) -> Measurement: ...


@dataclass
class Layout:
    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    def checkpoint(self, phase: str) -> Path:
        return self.work / f"{phase}-model"


@dataclass
class State:
    recipe: str
    config: dict[str, Any]
    done: list[str] = field(default_factory=list)
    curve: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": STATE_VERSION, **self.__dict__}, indent=1) + "\n")
        tmp.replace(path)


def check_out_dir(out: Path, resume: bool) -> None:
    """Refuse to write into a directory that holds anything, unless resuming a run there."""
    if out.exists() and not out.is_dir():
        raise BadRequest(f"--out {out} exists and is not a directory", component="train", field="--out")
    if resume:
        if not (out / "state.json").exists():
            raise BadRequest(
                f"--resume: {out} holds no recipe run to resume (no state.json)", component="train", field="--resume"
            )
    elif out.exists() and any(out.iterdir()):
        raise BadRequest(
            f"--out {out} exists and is not empty; choose a new directory, or pass --resume to continue the run there",
            component="train",
            field="--out",
        )


def _fixed_settings(config: dict[str, Any], finished: list[str]) -> Any:
    """The settings a resumed run must share with the original: all of them, except the GRPO
    phase's while GRPO has not finished (SFT once, then GRPO again with other settings or another
    --backend, e.g. on a GPU)."""
    fixed = {k: v for k, v in config.items() if k != "grpo" or "rl" in finished}
    return json.loads(json.dumps(fixed))


def load_state(layout: Layout, cfg: RecipeConfig, resume: bool) -> State:
    if not resume:
        return State(recipe=cfg.name, config=cfg.as_dict())
    raw = json.loads(layout.state.read_text())
    if raw.get("recipe") != cfg.name:
        raise BadRequest(
            f"--resume: {layout.root} holds a run of recipe {raw.get('recipe')!r}, not {cfg.name!r}",
            component="train",
            field="--recipe",
        )
    finished = raw.get("done") or []
    if _fixed_settings(raw.get("config") or {}, finished) != _fixed_settings(cfg.as_dict(), finished):
        free = "" if "rl" in finished else " (only the GRPO settings may change before GRPO has finished)"
        raise BadRequest(
            f"--resume: the run in {layout.root} used other settings; resume it with the same ones{free}",
            component="train",
            field="--resume",
        )
    state = State(**{k: v for k, v in raw.items() if k != "version"})
    state.config = cfg.as_dict()
    # An unfinished phase restarts from scratch: drop what it had measured.
    state.curve = [p for p in state.curve if p["phase"] in state.done]
    greedy = state.info.get("greedy") or {}
    state.info["greedy"] = {phase: g for phase, g in greedy.items() if phase in state.done}
    return state


def _load(path: Path, device: str = "cpu"):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path).to(device), AutoTokenizer.from_pretrained(path)


def _save(model: Any, tokenizer: Any, path: Path) -> Path:
    from rollgate.model_server.tiny import make_world_readable
    from rollgate.trainer_adapters.recipes.trainable import plain_state_dict

    tmp = path.with_name(path.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, state_dict=plain_state_dict(model))
    tokenizer.save_pretrained(tmp)
    make_world_readable(tmp)
    shutil.rmtree(path, ignore_errors=True)
    tmp.replace(path)
    return path


class RecipeRun:
    def __init__(self, cfg: RecipeConfig, out: Path, evaluate: Evaluator, *, resume: bool = False):
        check_out_dir(out, resume)
        out.mkdir(parents=True, exist_ok=True)
        self.cfg = cfg
        self.layout = Layout(out)
        self.evaluate = evaluate
        self.state = load_state(self.layout, cfg, resume)
        self.state.save(self.layout.state)

    @property
    def train_device(self) -> str:
        """Where SFT and TRL's GRPO train (Unsloth places its own model)."""
        return "cuda" if self.cfg.on_gpu else "cpu"

    def _measure(self, model: Any, tokenizer: Any, phase: str, step: int, label: str) -> dict[str, Any]:
        ckpt = _save(model, tokenizer, self.layout.work / "eval-model")
        m = self.evaluate(ckpt, label)
        point = {"phase": phase, "step": step, "label": label, "reward": m.reward, "ci": list(m.ci) if m.ci else None}
        point.update(failure_fraction=m.failure_fraction, report=m.report)
        self.state.curve.append(point)
        self.state.save(self.layout.state)
        log.info("held-out reward at %s (step %d): %.3f", label, step, m.reward)
        return point

    def _greedy_reference(self, ckpt: Path, phase: str) -> None:
        """The phase's saved checkpoint decoded greedily (eval.greedy_reference), kept beside the curve."""
        if not self.cfg.eval.greedy_reference or self.cfg.eval.temperature == 0:
            return
        m = self.evaluate(ckpt, f"{phase}-greedy", greedy=True)
        self.state.info.setdefault("greedy", {})[phase] = {
            "reward": m.reward,
            "ci": list(m.ci) if m.ci else None,
            "failure_fraction": m.failure_fraction,
            "report": m.report,
        }
        self.state.save(self.layout.state)
        log.info("held-out reward of the %s checkpoint, greedy: %.3f", phase, m.reward)

    def _phase(self, name: str, fn) -> None:
        if name in self.state.done:
            log.info("phase %s: done in an earlier run, skipped", name)
            return
        started = time.perf_counter()
        fn()
        self.state.seconds[name] = round(time.perf_counter() - started, 1)
        self.state.done.append(name)
        self.state.save(self.layout.state)

    def run(self) -> dict[str, Any]:
        self.prepare()
        self._phase("rl", self._rl)
        return self._finish()

    def prepare(self) -> Path:
        """Every phase before GRPO (data, init, before, sft); the post-SFT checkpoint's path.
        benchmarks/bench_async_rl.py starts its GRPO runs from it."""
        import torch

        torch.manual_seed(self.cfg.seed)
        self._phase("data", self._data)
        self._phase("init", self._init)
        self._phase("before", self._before)
        self._phase("sft", self._sft)
        return self.layout.checkpoint("sft")

    # phases

    def _data(self) -> None:
        d = self.layout.data
        d.mkdir(parents=True, exist_ok=True)
        train, heldout = generate_tasks(self.cfg)
        write_rows(d / "train_tasks.jsonl", train)
        write_rows(d / "heldout_tasks.jsonl", heldout)
        _, stats = collect_gold(self.cfg, train, d)
        self.state.info.update(train_tasks=len(train), heldout_tasks=len(heldout), gold_demos=stats.written)

    def _init(self) -> None:
        from rollgate.trainer_adapters.recipes.policy import build_policy, parameter_count

        tools = template_tools(self.cfg.env)
        path = build_policy(
            self.cfg, self.layout.checkpoint("init"), sft_records(self.layout.data / "sft.jsonl"), tools
        )
        model, _ = _load(path)
        self.state.info["parameters"] = parameter_count(model)

    def _before(self) -> None:
        model, tok = _load(self.layout.checkpoint("init"))
        self._measure(model, tok, "before", 0, "before")

    def _sft(self) -> None:
        from rollgate.trainer_adapters.recipes.sft_phase import train_sft

        model, tok = _load(self.layout.checkpoint("init"), self.train_device)
        tools = template_tools(self.cfg.env)
        examples = tokenize_records(tok, sft_records(self.layout.data / "sft.jsonl"), tools)
        every = self.cfg.sft.eval_every

        def on_step(step: int, loss: float) -> None:
            if every and step % every == 0 and step >= self.cfg.sft.eval_from:
                self._measure(model, tok, "sft", step, f"sft-step-{step}")

        result = train_sft(model, examples, self.cfg.sft, pad_id=tok.pad_token_id, seed=self.cfg.seed, on_step=on_step)
        if not self.state.curve or self.state.curve[-1]["label"] != f"sft-step-{result.steps}":
            self._measure(model, tok, "sft", result.steps, f"sft-step-{result.steps}")
        self._greedy_reference(_save(model, tok, self.layout.checkpoint("sft")), "sft")
        self.state.info.update(sft_steps=result.steps, sft_final_loss=result.final_loss, sft_tokens=result.tokens)

    def _rl(self) -> None:
        from rollgate.trainer_adapters.recipes.grpo_phase import train_grpo

        if self.cfg.grpo.backend == "unsloth":
            from rollgate.model_server.tiny import CONTEXT
            from rollgate.trainer_adapters.unsloth import load_policy

            model, tok = load_policy(self.layout.checkpoint("sft"), max_seq_length=CONTEXT)
        else:
            model, tok = _load(self.layout.checkpoint("sft"), self.train_device)
        base = int(self.state.info["sft_steps"])
        every = self.cfg.grpo.eval_every

        def on_step(step: int) -> None:
            if every and step % every == 0 and step < self.cfg.grpo.steps:
                self._measure(model, tok, "rl", base + step, f"rl-step-{step}")

        rows = read_rows(self.layout.data / "train_tasks.jsonl")
        result = train_grpo(self.cfg, model, tok, rows, self.layout.work / "grpo", on_step=on_step)
        # The last point once the trainer and its rollout engine are gone: measured inside the last
        # step, beside them, SmolLM2's evaluation took the process to 23.6 GB (docs/trainers/recipes.md).
        gc.collect()
        last = self.state.curve[-1]
        if last["phase"] != "rl" or last["step"] != base + result.steps:
            self._measure(model, tok, "rl", base + result.steps, f"rl-step-{result.steps}")
        self._greedy_reference(_save(model, tok, self.layout.model), "rl")
        self.state.info.update(
            rl_steps=result.steps,
            rl_train_reward=result.train_reward,
            rl_episodes=result.episodes,
            rl_step_seconds=result.step_seconds,
            rl_async=result.async_stats,
            rl_screening=result.screening,
            rl_trainable_parameters=result.trainable_parameters,
            rl_push_seconds=result.push_seconds,
        )

    def _finish(self) -> dict[str, Any]:
        from rollgate.trainer_adapters.recipes.plot import plot_curve

        curve = self.state.curve
        info = self.state.info

        def last(phase: str) -> float:
            return [p for p in curve if p["phase"] == phase][-1]["reward"]

        before, sft, rl = last("before"), last("sft"), last("rl")
        greedy = info.get("greedy") or {}
        seconds = round(sum(self.state.seconds.values()), 1)
        cfg = self.cfg
        metrics = {
            "recipe": cfg.name,
            "env": cfg.env,
            "heldout_tasks": info["heldout_tasks"],
            "train_tasks": info["train_tasks"],
            "gold_demos": info["gold_demos"],
            "reward_before": before,
            "reward_after_sft": sft,
            "reward_after_rl": rl,
            # eval.greedy_reference: the post-SFT and final checkpoints decoded greedily (else None)
            "reward_after_sft_greedy": (greedy.get("sft") or {}).get("reward"),
            "reward_after_rl_greedy": (greedy.get("rl") or {}).get("reward"),
            "greedy": greedy or None,
            "steps": info["sft_steps"] + info["rl_steps"],
            "sft_steps": info["sft_steps"],
            "rl_steps": info["rl_steps"],
            "seconds": seconds,
            "seconds_by_phase": self.state.seconds,
            "parameters": info["parameters"],
            "evaluation": {
                "k": cfg.eval.k,
                "temperature": cfg.eval.temperature,
                "threshold": cfg.eval.threshold,
                "tasks": "data/heldout_tasks.jsonl (the eval split: disjoint from data/train_tasks.jsonl)",
            },
            "targets": cfg.targets,
            "curve": curve,
            "rl_backend": cfg.grpo.backend,
            "rl_generation": cfg.grpo.generation,
            "rl_screening": info.get("rl_screening"),
            "rl_trainable": cfg.grpo.trainable,
            "rl_trainable_parameters": info.get("rl_trainable_parameters"),
            "rl_train_reward": info.get("rl_train_reward"),
            "rl_episodes": info.get("rl_episodes"),
            **rl_timing(cfg, info),
            "config": cfg.as_dict(),
        }
        (self.layout.root / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
        title = (
            f"{cfg.name}: held-out reward on {info['heldout_tasks']} {cfg.env} tasks "
            f"(before {before:.2f}, SFT {sft:.2f}, GRPO {rl:.2f})"
        )
        plot_curve(
            curve,
            info["sft_steps"],
            self.layout.root / "reward_curve.png",
            title=title,
            greedy={phase: g["reward"] for phase, g in greedy.items()},
        )
        return metrics
