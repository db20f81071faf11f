"""The recipe's starting policy: either a tiny Qwen2 model of the recipe's shape, built offline and
deterministically (rollgate.model_server.tiny), whose tokenizer also learned the merges of the
recipe's own demonstrations (train split only), so its episodes take about half the tokens; or a
pretrained model of the registry (`recipe.model`), as `rollgate model get` converted it."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from rollgate.core.errors import BadRequest
from rollgate.model_server.tiny import build_tiny_model, make_world_readable
from rollgate.trainer_adapters.recipes.config import RecipeConfig

log = logging.getLogger("rollgate.train")


def pretrained_checkpoint(name: str, home: str | Path) -> Path:
    """The registry model's converted checkpoint, fetched and converted once if it is not in the
    cache yet (the same path as `rollgate model get NAME`); BadRequest naming that command when it
    cannot be had."""
    from rollgate.core.model_registry import get_model
    from rollgate.model_server.fetch import FetchError, ensure_model

    entry = get_model(name, field="recipe.model")
    try:
        return ensure_model(entry.name, home)
    except FetchError as exc:
        raise BadRequest(
            f"the recipe's model {name!r} is not available: {exc}; fetch it with `rollgate model get {name}`",
            component="train",
            field="recipe.model",
        ) from None


def build_policy(
    cfg: RecipeConfig, out_dir: Path, sft_records: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> Path:
    """No warm-up for a tiny model: it starts untrained (held-out reward ~0), and SFT alone teaches
    it. A pretrained model starts as it was published."""
    if cfg.model is None:
        transcripts = [(r["messages"], tools) for r in sft_records]
        return build_tiny_model(out_dir, cfg.seed, warmup_steps=0, shape=cfg.shape, extra_transcripts=transcripts)
    from rollgate.core.settings import Settings

    source = pretrained_checkpoint(cfg.model, Settings().home)
    tmp = out_dir.with_name(out_dir.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp)
    make_world_readable(tmp)
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.replace(out_dir)
    log.info("starting policy: %s from %s", cfg.model, source)
    return out_dir


def parameter_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())
