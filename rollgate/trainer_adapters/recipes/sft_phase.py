"""Supervised fine-tuning on gold demonstrations, loss on the assistant's tokens only.

Every demonstration of an environment starts with the same long context (system prompt and tool
schemas), and on CPU that shared prefix would be most of the compute. So each batch runs its
common token prefix once (batch size 1, with gradients), repeats its key/value cache across the
batch, and runs only the distinct suffixes. With causal attention this is the same computation as
the full batch (same logits, same gradients), a few times cheaper.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rollgate.core.tokens import common_prefix
from rollgate.trainer_adapters.recipes.config import SFTPhase
from rollgate.trainer_adapters.recipes.prefix_logps import after_prefix
from rollgate.trainer_adapters.recipes.trainable import restrict_trainable

log = logging.getLogger("rollgate.train")

OnStep = Callable[[int, float], None]  # (SFT step just finished, its loss)


@dataclass
class SFTResult:
    steps: int
    final_loss: float
    seconds: float
    tokens: int


def batch_loss(model: Any, batch: Sequence[tuple[list[int], list[int]]], pad_id: int | None) -> tuple[Any, int]:
    """Mean token loss over the batch's masked tokens (and how many there were)."""
    import torch
    import torch.nn.functional as F

    # Keep at least one token out of the prefix, so every row has a suffix to predict from.
    p = min(common_prefix([ids for ids, _ in batch]), min(len(ids) for ids, _ in batch) - 1)
    b = len(batch)
    width = max(len(ids) for ids, _ in batch) - p
    # padded positions are masked out of attention and loss: any id will do where a tokenizer has none
    suffix = torch.full((b, width), pad_id if pad_id is not None else 0, dtype=torch.long)
    labels = torch.full((b, width), -100, dtype=torch.long)
    attn = torch.zeros((b, p + width), dtype=torch.long)
    for row, (ids, mask) in enumerate(batch):
        tail = ids[p:]
        suffix[row, : len(tail)] = torch.tensor(tail)
        labels[row, : len(tail)] = torch.tensor([t if m else -100 for t, m in zip(tail, mask[p:], strict=True)])
        attn[row, : p + len(tail)] = 1
    # Position p's token is predicted by the prefix's last logit; it is context (mask 0) for
    # every chat transcript (a user or system token), so dropping that one prediction loses no loss.
    device = model.get_output_embeddings().weight.device  # the CPU, or the GPU of a GPU run
    suffix, labels, attn = suffix.to(device), labels.to(device), attn.to(device)
    shared = after_prefix(model, torch.tensor(batch[0][0][:p], device=device), b, width)
    out = model.base_model(input_ids=suffix, attention_mask=attn, **shared)
    # The output layer runs on the predicted tokens only (the assistant's): on a 49k-token
    # vocabulary it costs as much as a few decoder layers for each position it scores.
    target = labels[:, 1:]
    keep = target != -100
    n = int(keep.sum())
    logits = model.get_output_embeddings()(out.last_hidden_state[:, :-1][keep]).float()
    loss = F.cross_entropy(logits, target[keep], reduction="sum")
    return loss / max(n, 1), n


def train_sft(
    model: Any,
    examples: Sequence[tuple[list[int], list[int]]],
    phase: SFTPhase,
    *,
    pad_id: int | None,
    seed: int,
    on_step: OnStep | None = None,
) -> SFTResult:
    """AdamW on the weights `phase.trainable` names (the rest frozen for the phase), linear warm-up
    then linear decay to 0, gradient norm clipped at 1."""
    import torch

    started = time.perf_counter()
    rng = random.Random(seed)
    per_epoch = max(1, len(examples) // phase.batch_size)
    total = max(1, math.ceil(per_epoch * phase.epochs))
    restriction = restrict_trainable(model, phase.trainable)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=phase.learning_rate, weight_decay=0.0)
    model.train()
    order: list[int] = []
    loss_value, tokens = float("nan"), 0
    for step in range(total):
        if len(order) < phase.batch_size:
            fresh = list(range(len(examples)))
            rng.shuffle(fresh)
            order += fresh
        batch = [examples[i] for i in order[: phase.batch_size]]
        del order[: phase.batch_size]
        warm = min(1.0, (step + 1) / max(1, phase.warmup_steps))
        for group in opt.param_groups:
            group["lr"] = phase.learning_rate * warm * (1 - step / total)
        loss, n = batch_loss(model, batch, pad_id)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_value, tokens = float(loss.detach()), tokens + n
        if (step + 1) % 10 == 0 or step + 1 == total:
            log.info("sft step %d/%d loss %.4f (%.0fs)", step + 1, total, loss_value, time.perf_counter() - started)
        if on_step is not None:
            model.eval()
            on_step(step + 1, loss_value)
            model.train()
    model.eval()
    restriction.release()
    return SFTResult(steps=total, final_loss=loss_value, seconds=time.perf_counter() - started, tokens=tokens)
