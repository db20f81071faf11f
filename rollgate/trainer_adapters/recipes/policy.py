"""The recipe's starting policy: a tiny Qwen2 model of the recipe's shape, built offline and
deterministically (rollgate.model_server.tiny), whose tokenizer also learned the merges of the
recipe's own demonstrations (train split only), so its episodes take about half the tokens."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from rollgate.model_server.tiny import build_tiny_model
from rollgate.trainer_adapters.recipes.config import RecipeConfig

log = logging.getLogger("rollgate.train")


def build_policy(
    cfg: RecipeConfig, out_dir: Path, sft_records: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> Path:
    """No warm-up: the model starts untrained (held-out reward ~0), and SFT alone teaches it."""
    transcripts = [(r["messages"], tools) for r in sft_records]
    return build_tiny_model(out_dir, cfg.seed, warmup_steps=0, shape=cfg.shape, extra_transcripts=transcripts)


def parameter_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())
