"""GRPO on the verified reward only: TRL's GRPOTrainer, with every rollout an episode of Rollgate's
agent loop (multi-turn, the environment's tools) served by the policy being trained, in process
(rollgate.trainer_adapters.inprocess). No shaping term: a group whose samples all score the same
has zero advantage and teaches nothing, which is why SFT comes first.

`grpo.mode`: "sync" generates each step's rollouts with the weights being trained, then trains;
"async" collects step N+1's rollouts while step N trains, at most `grpo.max_staleness` policy
versions behind (rollgate.trainer_adapters.async_rl), serving a copy of the policy that gets the
trainer's weights after each optimizer step. Each step's wall time (held-out evaluation left out)
is recorded either way, so the two can be compared.

`grpo.backend`: "trl" trains on the CPU with TRL's GRPOTrainer; "unsloth" on a CUDA GPU with the
GRPOTrainer Unsloth patches (the model loaded by trainer_adapters.unsloth.load_policy), with the
same rollout function and reward.

`grpo.generation`: "local" generates with the policy in process (shared weights in sync mode, a
copy in async mode); "vllm" with a vLLM server the phase starts on the policy (vLLM from this
interpreter or the one ROLLGATE_VLLM_PYTHON names), which reloads the trainer's weights after
every optimizer step (rollgate.trainer_adapters.vllm_rollouts), in either mode.

`grpo.trainable`: "all" updates every weight; "norms" only the normalization layers' scales;
"final_norm" only the last one's; "top:N" the last N decoder layers (the rest frozen for the phase
and thawed after it: recipes/trainable.py), for budgets whose batches cannot estimate more
(benchmarks/bench_grpo_snr.py measures how much of a batch's gradient is signal)."""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollgate.core.errors import RollgateError
from rollgate.core.settings import Settings
from rollgate.trainer_adapters.recipes.config import RecipeConfig
from rollgate.trainer_adapters.recipes.data import agent_settings
from rollgate.trainer_adapters.recipes.prefix_logps import shared_prefix_trainer
from rollgate.trainer_adapters.recipes.trainable import restrict_trainable

log = logging.getLogger("rollgate.train")

OnStep = Callable[[int], None]  # (GRPO step just finished)
# vLLM beside the trainer on one GPU: the share of its memory vLLM takes (weights and KV cache)
VLLM_GPU_SHARE = 0.3


@dataclass
class GRPOResult:
    steps: int
    seconds: float
    train_reward: list[float]  # the mean reward of each step's rollouts (training tasks)
    episodes: int
    step_seconds: list[float] = field(default_factory=list)  # wall time of each step, evaluation excluded
    async_stats: dict[str, Any] | None = None  # async mode: staleness, drops, prefetches
    screening: dict[str, Any] | None = None  # what screening kept (grpo.screen_tasks > 0)
    trainable_parameters: int = 0  # how many numbers GRPO updated (grpo.trainable)
    push_seconds: list[float] = field(default_factory=list)  # vLLM generation: each weight push's wall time


SCREEN_VERDICTS = ("kept", "all_solved", "all_failed")


def verdict(rewards: list[float], threshold: float) -> str:
    """A screened task's verdict from its samples' verified rewards (failed episodes left out)."""
    passed = sum(r >= threshold for r in rewards)
    if rewards and 0 < passed < len(rewards):
        return "kept"
    return "all_solved" if rewards and passed == len(rewards) else "all_failed"


def choose_pool(pool: list[dict[str, Any]], verdicts: list[str], keep_solved: float) -> tuple[list, dict]:
    """The rows GRPO trains on, from the screened rows and their verdicts: the kept ones, then
    `keep_solved` of each category's all-solved ones (rounded up, in screening order) as anchors.
    An anchor's group has no contrast while every sample solves it, and a negative one for the
    samples that fail it as soon as a skill trained on another kind leaks into its kind."""
    kept: list[dict[str, Any]] = []
    solved: dict[str, list[dict[str, Any]]] = {}
    by_category: dict[str, dict[str, int]] = {}
    for row, v in zip(pool, verdicts, strict=True):
        category = str(row.get("category") or "-")
        counts = by_category.setdefault(category, {**dict.fromkeys(SCREEN_VERDICTS, 0), "anchors": 0})
        counts[v] += 1
        if v == "kept":
            kept.append(row)
        elif v == "all_solved":
            solved.setdefault(category, []).append(row)
    anchors: list[dict[str, Any]] = []
    for category, rows in solved.items():
        # rounded before the ceiling: 0.28 x 25 is 7.000000000000001 in floating point, and 7 tasks
        take = math.ceil(round(keep_solved * len(rows), 9))
        anchors += rows[:take]
        by_category[category]["anchors"] = take
    return kept + anchors, dict(sorted(by_category.items()))


def screen(rollout_func: Any, rollgate: Any, rows: list[dict[str, Any]], cfg: RecipeConfig) -> tuple[list, dict]:
    """The training rows GRPO can learn from: of the first `screen_tasks`, those whose
    `screen_samples` episodes under the current policy are neither all solved nor all failed (by
    verified reward, at the GRPO temperature), with `screen_keep_solved` of the all-solved ones as
    anchors (choose_pool). Failed episodes (infrastructure) count as neither."""
    from rollgate.core.schemas import TaskRow

    g = cfg.grpo
    pool = rows[: g.screen_tasks]
    started = time.perf_counter()
    groups = rollout_func.run_async(
        rollgate.collect(
            [TaskRow.model_validate(r) for r in pool],
            [g.screen_samples] * len(pool),
            sampling={"temperature": g.temperature},
            policy_version="step-0",
        )
    )
    verdicts = [
        verdict([t.reward for t in trajs if t.ok and t.reward is not None], cfg.eval.threshold) for trajs in groups
    ]
    chosen, by_category = choose_pool(pool, verdicts, g.screen_keep_solved)
    info: dict[str, Any] = {
        "screened": len(pool),
        "samples": g.screen_samples,
        **{v: verdicts.count(v) for v in SCREEN_VERDICTS},
        "anchors": len(chosen) - verdicts.count("kept"),
        # which kinds of task GRPO trains on, and which it never samples again (the row's category)
        "by_category": by_category,
        "seconds": round(time.perf_counter() - started, 1),
    }
    # Fewer rows with contrast than a step's prompts would give TRL no full batch of them (with no
    # anchors, it would train 0 steps): train on all rows instead.
    info["used"] = "kept" if info["kept"] >= g.prompts_per_step else "all"
    log.info("grpo screening: %s", info)
    if info["used"] == "all":
        log.warning(
            "grpo screening kept %d tasks, fewer than a step's %d prompts; training on all %d rows",
            info["kept"],
            g.prompts_per_step,
            len(rows),
        )
        return rows, info
    return chosen, info


def rollout_source(cfg: RecipeConfig, model: Any, tokenizer: Any, work_dir: Path, settings: Settings) -> Any:
    """Where the phase's rollouts come from: the policy in process, or a vLLM server of its own
    (grpo.generation), playing the recipe's environment under its agent budget."""
    g = cfg.grpo
    if g.generation == "vllm":
        from rollgate.model_server.vllm_process import INSTALL_HINT, PYTHON_ENV, find_vllm_python
        from rollgate.trainer_adapters.vllm_rollouts import VllmRollgate

        python = find_vllm_python()
        if python is None:
            raise RollgateError(
                f"GRPO generation vllm: vllm is not importable and {PYTHON_ENV} is not set; {INSTALL_HINT}",
                component="train",
            )
        return VllmRollgate.start(
            model,
            tokenizer,
            [cfg.env],
            python=python,
            work_dir=work_dir / "vllm",
            gpu_memory_utilization=VLLM_GPU_SHARE if cfg.on_gpu else None,
            agent_settings=agent_settings(cfg),
            settings=settings,
        )
    from rollgate.trainer_adapters.inprocess import InProcessRollgate

    return InProcessRollgate(
        model,
        tokenizer,
        [cfg.env],
        agent_settings=agent_settings(cfg),
        settings=settings,
        share_weights=g.mode != "async",
    )


def optimizer(model: Any, args: Any, g: Any) -> Any:
    """None (the trainer builds its AdamW from `args`), or, with `g.norm_learning_rate`, an AdamW
    whose final-norm scales step at that rate and the other trainable weights at the phase's."""
    if g.norm_learning_rate is None:
        return None
    import torch

    from rollgate.trainer_adapters.recipes.trainable import trainable_parameters

    norm = {id(p) for p in trainable_parameters(model, "final_norm")}
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if id(p) not in norm], "lr": g.learning_rate},
        {"params": [p for p in params if id(p) in norm], "lr": g.norm_learning_rate},
    ]
    return torch.optim.AdamW(
        [group for group in groups if group["params"]],
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
        weight_decay=args.weight_decay,
    )


def train_grpo(
    cfg: RecipeConfig,
    model: Any,
    tokenizer: Any,
    rows: list[dict[str, Any]],
    work_dir: Path,
    *,
    on_step: OnStep | None = None,
) -> GRPOResult:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rollgate.trainer_adapters.async_rl import weight_push_callback
    from rollgate.trainer_adapters.trl import TaskIndex, rollgate_reward

    g = cfg.grpo
    on_gpu = cfg.on_gpu
    dtype = getattr(model, "dtype", None)
    started = time.perf_counter()
    settings = Settings().model_copy(update={"envs": [cfg.env]})
    asynchronous = g.mode == "async"
    rollgate = rollout_source(cfg, model, tokenizer, work_dir, settings)
    # Unseeded sampling: a seed per request would make a group's samples identical (no advantage).
    rollout_func = rollgate.rollout_func(
        rows, sampling={"temperature": g.temperature}, max_staleness=g.max_staleness if asynchronous else None
    )
    try:
        train_rows, screening = screen(rollout_func, rollgate, rows, cfg) if g.screen_tasks > 0 else (rows, None)
    except BaseException:
        rollout_func.run_async(rollgate.aclose())
        rollout_func.close()
        raise
    args = GRPOConfig(
        output_dir=str(work_dir),
        use_cpu=not on_gpu,
        bf16=on_gpu and dtype == torch.bfloat16,
        fp16=on_gpu and dtype == torch.float16,
        report_to=[],
        max_steps=g.steps,
        per_device_train_batch_size=g.prompts_per_step * g.num_generations,
        # TRL's defaults, set rather than left to the trainer: Unsloth's patched GRPOConfig has its
        # own (gradient accumulation 2, weight decay 0.001, 8-bit AdamW, a warm-up), under which a
        # step took 2 x 128 episodes on an H200 and the two backends ran different phases.
        gradient_accumulation_steps=1,
        weight_decay=0.0,
        optim="adamw_torch_fused",
        warmup_steps=0,
        num_generations=g.num_generations,
        max_completion_length=g.max_completion_length,
        temperature=g.temperature,
        learning_rate=g.learning_rate,
        top_entropy_quantile=g.top_entropy_quantile,
        num_iterations=g.num_iterations,
        lr_scheduler_type="constant",
        beta=g.beta,  # 0: no reference model, nothing pulls the policy back
        logging_steps=1,
        save_strategy="no",
        seed=cfg.seed,
        data_seed=cfg.seed,
        dataloader_num_workers=0,
        disable_tqdm=True,
        gradient_checkpointing=False,  # on by default in TRL; for a model this small it only costs time
    )
    rewards: list[float] = []
    step_seconds: list[float] = []
    episodes = 0
    last = [time.perf_counter()]  # when the current step began (after the previous one's evaluation)

    class Steps(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            last[0] = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            nonlocal episodes
            step_seconds.append(round(time.perf_counter() - last[0], 3))
            trajs = rollout_func.last_trajectories
            ok = [t.reward for t in trajs if t.ok and t.reward is not None]
            episodes += len(trajs)
            rewards.append(sum(ok) / len(ok) if ok else float("nan"))
            log.info(
                "grpo step %d/%d: train reward %.3f over %d episodes (%.0fs)",
                state.global_step,
                g.steps,
                rewards[-1],
                len(trajs),
                time.perf_counter() - started,
            )
            if on_step is not None:
                was = model.training
                model.eval()
                on_step(state.global_step)
                model.train(was)
            last[0] = time.perf_counter()

    pushes = asynchronous or g.generation == "vllm"  # the served policy is a copy that needs the weights
    restriction = restrict_trainable(model, g.trainable)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if restriction.frozen:
        total = sum(p.numel() for p in model.parameters())
        log.info("grpo updates the %s only: %d of %d numbers", g.trainable, trainable, total)
    try:
        # On the CPU (TRL's trainer), the loss runs the prompt prefix the batch shares once
        # (recipes/prefix_logps.py): the same log-probabilities, a few times cheaper.
        trainer_class = GRPOTrainer if on_gpu else shared_prefix_trainer(GRPOTrainer)
        trainer = trainer_class(
            model=model,
            reward_funcs=[rollgate_reward],
            args=args,
            train_dataset=rollout_func.tasks.dataset() if train_rows is rows else TaskIndex(train_rows).dataset(),
            processing_class=tokenizer,
            rollout_func=rollout_func,
            optimizers=(optimizer(model, args, g), None),
            # a served copy (async, vLLM): push the new weights first, so the batches collected
            # during evaluation use them
            callbacks=([weight_push_callback(rollgate, model)] if pushes else []) + [Steps()],
        )
        trainer.train()
        if trainer.state.global_step != g.steps:  # an empty epoch ends training without a word
            raise RollgateError(
                f"GRPO ran {trainer.state.global_step} of {g.steps} steps: {len(train_rows)} training tasks, "
                f"{g.prompts_per_step} prompts a step",
                component="train",
            )
    finally:
        rollout_func.run_async(rollgate.aclose())
        rollout_func.close()
        restriction.release()
    model.eval()
    stats = getattr(rollout_func, "stats", None)
    return GRPOResult(
        steps=trainer.state.global_step,
        seconds=time.perf_counter() - started,
        train_reward=rewards,
        episodes=episodes,
        step_seconds=step_seconds,
        async_stats=stats.as_dict() if stats is not None else None,
        push_seconds=list(getattr(rollgate, "push_seconds", [])),
        screening=screening,
        trainable_parameters=trainable,
    )
