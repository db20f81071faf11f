"""A recipe's supervised phase alone, as a cached checkpoint: what `rollgate demo` serves so that a
new user sees a model that learned something, not the untrained tiny model's zeros.

`ensure_sft_model(cfg, path)` runs the recipe's data, init and sft phases (no held-out evaluation,
no GRPO) once, and reuses the checkpoint while its stamp matches: the recipe's settings, the tiny
model's build version and the excluded rows. It needs only torch and transformers (the base
install): no TRL, accelerate, datasets or matplotlib. Rows the caller will show (the demo's
example rows) are excluded from training by content, so what the demo scores was never trained on.
The demo recipe's checkpoint ships with the package (`SHIPPED`), built by this same code.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rollgate.core.errors import BadRequest
from rollgate.model_server.tiny import RECIPE_VERSION, build_once, is_model_dir, make_world_readable
from rollgate.trainer_adapters.recipes.config import RecipeConfig

log = logging.getLogger("rollgate.train")

STAMP = "rollgate_recipe.json"
# The demo recipe's checkpoint as Rollgate ships it (package data, ~1 MB): `rollgate demo` serves it
# while its stamp matches the recipe, so a first run trains nothing. scripts/build_demo_policy.py
# rebuilds it; tests/trainer_adapters/test_demo_model.py fails when it is stale.
SHIPPED = Path(__file__).parent / "demo_policy"
PROGRESS_EVERY_S = 10.0
Progress = Callable[[str], None]


def stamp_of(cfg: RecipeConfig, exclude_keys: Iterable[str]) -> dict[str, Any]:
    """What a cached checkpoint was built from; any change rebuilds it. The checkpoint is the SFT
    phase's, so the recipe's GRPO settings are not part of it."""
    keys = sorted(set(exclude_keys))
    return {
        "recipe": cfg.name,
        "config": _sft_config(cfg.as_dict()),
        "tiny_recipe_version": RECIPE_VERSION,
        "excluded": hashlib.sha256("\n".join(keys).encode()).hexdigest(),
    }


def _sft_config(config: dict[str, Any]) -> dict[str, Any]:
    """A recipe's settings as JSON, less its GRPO phase's (a stamp written with them reads the same)."""
    return json.loads(json.dumps({k: v for k, v in config.items() if k != "grpo"}))


def train_rows(cfg: RecipeConfig, exclude_keys: set[str]) -> list[dict[str, Any]]:
    """The recipe's train split, less any row whose content is excluded."""
    from rollgate.resources_servers.families.splits import row_key
    from rollgate.trainer_adapters.recipes.data import generate_tasks

    train, _ = generate_tasks(cfg)
    return [r for r in train if row_key(cfg.env, r) not in exclude_keys]


def demonstrations(
    cfg: RecipeConfig, work: Path, exclude_keys: set[str], say: Progress
) -> tuple[list[tuple[list[int], list[int]]], Path]:
    """The recipe's gold demonstrations (played through the agent loop, exported as SFT) tokenized
    for its initial model, and that model's directory, written under `work`: what SFT starts from."""
    import torch
    from transformers import AutoTokenizer

    from rollgate.trainer_adapters.recipes.data import collect_gold, sft_records, template_tools, tokenize_records
    from rollgate.trainer_adapters.recipes.policy import build_policy

    torch.manual_seed(cfg.seed)
    rows = train_rows(cfg, exclude_keys)
    if not rows:
        raise BadRequest(f"recipe {cfg.name}: every training task is excluded", component="train", field="exclude")
    say(f"{cfg.name}: playing {len(rows)} gold {cfg.env} demonstrations through the agent loop")
    sft_file, _ = collect_gold(cfg, rows, work)
    tools = template_tools(cfg.env)
    records = sft_records(sft_file)
    init = build_policy(cfg, work / "init", records, tools)
    return tokenize_records(AutoTokenizer.from_pretrained(init), records, tools), init


def build_sft_model(
    cfg: RecipeConfig, out: Path, *, exclude_keys: Iterable[str] = (), progress: Progress | None = None
) -> Path:
    """Gold demonstrations (played through the agent loop, exported as SFT), the recipe's initial
    model, then its SFT phase; the checkpoint is written into `out` with its stamp."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollgate.trainer_adapters.recipes.sft_phase import train_sft

    say = progress or log.info
    excluded = set(exclude_keys)
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build.", dir=out))
    try:
        examples, init = demonstrations(cfg, work, excluded, say)
        model, tok = AutoModelForCausalLM.from_pretrained(init), AutoTokenizer.from_pretrained(init)
        total = max(1, int(len(examples) // cfg.sft.batch_size * cfg.sft.epochs + 0.999999))
        say(f"{cfg.name}: supervised fine-tuning, {total} steps of {cfg.sft.batch_size} demonstrations")
        # A line every PROGRESS_EVERY_S seconds, not every fifth of the run: on a loaded machine a
        # fifth took five minutes, which reads as a hang.
        sft_start, last = time.perf_counter(), [time.perf_counter()]

        def on_step(step: int, loss: float) -> None:
            now = time.perf_counter()
            if now - last[0] < PROGRESS_EVERY_S and step != total:
                return
            last[0] = now
            eta = (now - sft_start) / step * (total - step)
            say(
                f"{cfg.name}: SFT step {step}/{total}, loss {loss:.3f} "
                f"({now - started:.0f}s so far, about {eta:.0f}s left)"
            )

        result = train_sft(model, examples, cfg.sft, pad_id=tok.pad_token_id, seed=cfg.seed, on_step=on_step)
        model.save_pretrained(out)
        tok.save_pretrained(out)
        stamp = stamp_of(cfg, excluded) | {
            "sft_steps": result.steps,
            "sft_final_loss": round(result.final_loss, 4),
            "demonstrations": len(examples),
            "seconds": round(time.perf_counter() - started, 1),
        }
        (out / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    make_world_readable(out)
    return out


def ensure_sft_model(
    cfg: RecipeConfig, path: Path, *, exclude_keys: Iterable[str] = (), progress: Progress | None = None
) -> tuple[Path, bool]:
    """(`path`, whether it was built now): builds the checkpoint there unless a complete one of the
    same recipe, settings and exclusions is already there (`build_once`: concurrent callers wait on
    a lock file; the directory appears atomically)."""
    excluded = set(exclude_keys)
    built = build_once(
        path,
        lambda p: is_current(p, cfg, excluded),
        lambda tmp: build_sft_model(cfg, tmp, exclude_keys=excluded, progress=progress),
    )
    return path, built


def is_current(path: Path, cfg: RecipeConfig, exclude_keys: Iterable[str]) -> bool:
    """A complete checkpoint built from these settings and exclusions (its stamp says so)."""
    want = stamp_of(cfg, exclude_keys)
    try:
        raw = json.loads((path / STAMP).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(raw, dict) or not isinstance(raw.get("config"), dict):
        return False
    raw = raw | {"config": _sft_config(raw["config"])}
    return is_model_dir(path) and {k: raw.get(k) for k in want} == want
