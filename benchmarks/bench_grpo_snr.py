"""How much of a GRPO gradient is signal: the policy-gradient estimates of independent batches of
the same policy, compared with each other.

    python -m benchmarks.bench_grpo_snr --run runs/tiny-math                # its post-SFT checkpoint
    python -m benchmarks.bench_grpo_snr --run runs/tiny-math --batches 8 --prompts 16 --generations 8

Each batch is `--prompts` training tasks of the run (disjoint between batches) x `--generations`
episodes at the recipe's GRPO temperature, played by the in-process stack with the policy serving
itself, as in GRPO. Its gradient is that of the GRPO loss as the recipe trains it with TRL's
defaults on the first optimizer step: each episode's group-normalized advantage times its token
log-probs, summed over the model's tokens (tool output masked) and divided by the batch's token
count (loss_type "dapo", importance ratio 1, no KL term). Groups whose episodes all score the same
contribute nothing, as in GRPO.

If the estimate were mostly signal, two batches' gradients would point the same way. The report
gives the mean pairwise cosine of the batch gradients, for the whole model and for each parameter
tensor, and the norm of their mean against the mean norm of one (about sqrt(1/B) for pure noise, 1
for pure signal). `benchmarks/results/bench_grpo_snr.json` keeps the figures of the default
geometry, `bench_grpo_snr_<batches>x<prompts>x<generations>.json` those of any other
(`_<recipe>` appended for another recipe than tiny-math, `_<trainable>` for a `--trainable`).

`--trainable` measures only the weights a GRPO phase would update (recipes/trainable.py: a
pretrained model's full gradient costs a backward pass through all of it). For the final norm it
also gives each batch's step along the norm's own scales: a uniform rescaling of the logits, which
is what sampling at a lower temperature does (positive: the step sharpens). Its mean over the
batches against their spread says whether a batch can tell which way to sharpen."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import cli, common


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = cli.parser(__doc__, whole_doc=True)
    p.add_argument("--run", required=True, help="a `rollgate train` output directory (its data and checkpoints)")
    p.add_argument("--model", help="checkpoint to measure (default: the run's post-SFT checkpoint, work/sft-model)")
    # two batches at least: a cosine needs two gradients
    p.add_argument("--batches", type=cli.at_least(2), default=8)
    p.add_argument("--prompts", type=cli.COUNT, default=16, help="tasks a batch (the recipe's GRPO step has 8)")
    p.add_argument("--generations", type=cli.COUNT, default=8, help="episodes a task (the GRPO group)")
    p.add_argument("--show", type=cli.COUNT, default=8, help="parameter tensors listed, by pairwise cosine")
    p.add_argument(
        "--trainable",
        type=trainable_arg,
        default="all",
        help="the weights measured: all, norms, final_norm or top:N (a GRPO phase's `trainable`)",
    )
    return p.parse_args(argv)


def trainable_arg(text: str) -> str:
    from rollgate.trainer_adapters.recipes.trainable import check_trainable

    try:
        return check_trainable(text, "--trainable")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def scale_steps(grads: list[Any], weights: Any) -> dict[str, Any]:
    """Each batch's descent step (-gradient) projected on the unit vector of a norm's scales: how
    far it would rescale the logits (positive: sharper). The mean over batches, their standard
    deviation, and the share of the mean gradient's norm that lies along the scales."""
    import torch

    unit = weights.detach().reshape(-1).float()
    unit = unit / unit.norm()
    steps = [float(-(g @ unit)) for g in grads]
    mean = torch.stack(grads).mean(0)
    t = torch.tensor(steps, dtype=torch.float64)
    return {
        "per_batch": [round(x, 7) for x in steps],
        "mean": round(float(t.mean()), 7),
        "sd": round(float(t.std()), 7),
        "share_of_mean_gradient": round(abs(float(mean @ unit)) / max(float(mean.norm()), 1e-30), 4),
    }


def advantages(rewards: list[float | None]) -> list[float]:
    """TRL's group-normalized advantages (scale_rewards "group"); a failed episode (None) is left
    out of the group's statistics and gets 0."""
    import torch

    ok = [r for r in rewards if r is not None]
    if len(ok) < 2:
        return [0.0] * len(rewards)
    t = torch.tensor(ok, dtype=torch.float64)
    mean, std = float(t.mean()), float(t.std())
    return [0.0 if r is None else (r - mean) / (std + 1e-4) for r in rewards]


def batch_gradient(model: Any, groups: list[list[Any]], filler: int, temperature: float) -> tuple[Any, dict[str, int]]:
    """The flattened gradient of the batch's GRPO loss, and what went into it. Log-probs are of
    logits / temperature, as TRL computes them."""
    import torch

    from rollgate.core.tokens import trainable_sequence

    params = [p for p in model.parameters() if p.requires_grad]
    items = []
    for trajs in groups:
        adv = advantages([t.reward if t.ok else None for t in trajs])
        items += [(trainable_sequence(t, filler_token_id=filler), a) for t, a in zip(trajs, adv, strict=True)]
    tokens = sum(sum(seq.env_mask) for seq, _ in items)
    model.zero_grad(set_to_none=True)
    model.train()
    used = 0
    for seq, a in items:
        if a == 0.0 or not any(seq.env_mask):
            continue
        used += 1
        ids = torch.tensor([seq.prompt_ids + seq.completion_ids])
        logits = model(input_ids=ids).logits[0, len(seq.prompt_ids) - 1 : -1].float() / temperature
        logps = torch.log_softmax(logits, -1).gather(1, torch.tensor(seq.completion_ids)[:, None])[:, 0]
        mask = torch.tensor(seq.env_mask, dtype=torch.float32)
        (-(a * logps * mask).sum() / max(tokens, 1)).backward()
    model.eval()
    grads = [p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel()) for p in params]
    informative = sum(len({t.reward for t in g}) > 1 for g in groups)
    return torch.cat(grads).clone(), {"episodes_trained": used, "groups_with_signal": informative, "tokens": tokens}


def pairwise_cosine(vectors: list[Any]) -> float:
    cos = []
    for a, b in itertools.combinations(vectors, 2):
        denom = float(a.norm() * b.norm())
        cos.append(float(a @ b) / denom if denom > 0 else 0.0)
    return sum(cos) / len(cos)


def main(argv: list[str] | None = None) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollgate.core.schemas import TaskRow
    from rollgate.core.settings import Settings
    from rollgate.trainer_adapters.inprocess import InProcessRollgate
    from rollgate.trainer_adapters.recipes import get_recipe
    from rollgate.trainer_adapters.recipes.data import agent_settings, read_rows

    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    common.exit_on_sigterm()
    run = Path(args.run)
    state = json.loads((run / "state.json").read_text())
    cfg = get_recipe(state["recipe"])
    ckpt = Path(args.model) if args.model else run / "work" / "sft-model"
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    tok = AutoTokenizer.from_pretrained(ckpt)
    filler = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    if args.trainable != "all":
        from rollgate.trainer_adapters.recipes.trainable import restrict_trainable

        restrict_trainable(model, args.trainable)
    rows = read_rows(run / "data" / "train_tasks.jsonl")
    need = args.batches * args.prompts
    if len(rows) < need:
        raise SystemExit(f"--batches x --prompts = {need} tasks, but the run has {len(rows)} training tasks")
    settings = Settings().model_copy(update={"envs": [cfg.env]})
    stack = InProcessRollgate(model, tok, [cfg.env], agent_settings=agent_settings(cfg), settings=settings)
    sampling = {"temperature": cfg.grpo.temperature}  # unseeded, as GRPO samples

    async def collect() -> list[list[list[Any]]]:
        out = []
        try:
            for b in range(args.batches):
                batch = [TaskRow.model_validate(r) for r in rows[b * args.prompts : (b + 1) * args.prompts]]
                out.append(
                    await stack.collect(batch, [args.generations] * len(batch), sampling=sampling, policy_version="snr")
                )
        finally:
            await stack.aclose()
        return out

    started = time.perf_counter()
    batches = asyncio.run(collect())
    collect_s = time.perf_counter() - started
    grads, info = [], []
    for groups in batches:
        g, i = batch_gradient(model, groups, filler, cfg.grpo.temperature)
        rewards = [t.reward for gr in groups for t in gr if t.ok and t.reward is not None]
        i.update(mean_reward=round(sum(rewards) / max(len(rewards), 1), 4), grad_norm=round(float(g.norm()), 5))
        grads.append(g)
        info.append(i)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    sizes = [p.numel() for p in model.parameters() if p.requires_grad]
    per_tensor = []
    for name, chunks in zip(names, zip(*(torch.split(g, sizes) for g in grads), strict=True), strict=True):
        mean = torch.stack(chunks).mean(0)
        per_tensor.append(
            {"tensor": name, "numel": chunks[0].numel(), "pairwise_cosine": round(pairwise_cosine(list(chunks)), 4)}
            | {"mean_grad_norm": round(float(mean.norm()), 6)}
        )
    per_tensor.sort(key=lambda r: -r["pairwise_cosine"])
    mean = torch.stack(grads).mean(0)
    whole = {
        "pairwise_cosine": round(pairwise_cosine(grads), 4),
        "mean_of_batches_norm": round(float(mean.norm()), 5),
        "batch_norm_mean": round(sum(float(g.norm()) for g in grads) / len(grads), 5),
        "pure_noise_ratio": round(1 / math.sqrt(len(grads)), 4),
    }
    whole["norm_ratio"] = round(whole["mean_of_batches_norm"] / whole["batch_norm_mean"], 4)
    scale = None
    if args.trainable == "final_norm":
        scale = scale_steps(grads, next(p for p in model.parameters() if p.requires_grad))
    common.print_table(
        per_tensor[: args.show],
        ["tensor", "numel", "pairwise_cosine", "mean_grad_norm"],
        title=f"{cfg.name}, {ckpt}: {args.batches} batches x {args.prompts} tasks x {args.generations} episodes",
    )
    print(
        f"\nwhole model: mean pairwise cosine {whole['pairwise_cosine']:+.4f}; |mean of batches| / mean |batch| = "
        f"{whole['norm_ratio']:.3f} (pure noise {whole['pure_noise_ratio']:.3f}, pure signal 1)"
    )
    if scale is not None:
        print(
            f"final norm, step along its scales (positive: sharper): mean {scale['mean']:+.2e}, sd {scale['sd']:.2e} "
            f"over batches; {scale['share_of_mean_gradient']:.1%} of the mean gradient lies along them"
        )
    default = (args.batches, args.prompts, args.generations) == (8, 16, 8)
    name = "bench_grpo_snr" if default else f"bench_grpo_snr_{args.batches}x{args.prompts}x{args.generations}"
    if cfg.name != "tiny-math":
        name += f"_{cfg.name}"
    if args.trainable != "all":
        name += "_" + args.trainable.replace(":", "")
    path = common.write_results(
        name,
        {
            "recipe": cfg.name,
            "checkpoint": str(ckpt),
            "batches": args.batches,
            "prompts": args.prompts,
            "generations": args.generations,
            "trainable": args.trainable,
            "collect_seconds": round(collect_s, 1),
            "per_batch": info,
            "whole_model": whole,
            "final_norm_scale_steps": scale,
            "per_tensor": per_tensor,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
