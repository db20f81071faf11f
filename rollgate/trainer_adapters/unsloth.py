"""Unsloth: it patches TRL's GRPOTrainer in place (`from unsloth import FastLanguageModel` before
importing trl), keeping the `rollout_func` / `env_mask` contract, so the TRL adapter is used as is.
What differs is the TRL versions Unsloth accepts; this module checks them before a run starts.

Unsloth needs a CUDA GPU even to import, so importing this module never imports it: `unsloth_problem`
says whether it can run here, `patch_trl` imports it (before trl, which it patches) and
`load_policy` loads a checkpoint through `FastLanguageModel` for full fine-tuning.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from rollgate.trainer_adapters.trl import (
    RollgateRolloutFunc,
    TaskIndex,
    make_rollout_func,
    reward_component,
    rollgate_reward,
)

__all__ = [
    "UNSLOTH_TRL_SPEC",
    "trl_version_problem",
    "unsloth_problem",
    "bitsandbytes_problem",
    "patch_trl",
    "load_policy",
    "make_rollout_func",
    "RollgateRolloutFunc",
    "TaskIndex",
    "rollgate_reward",
    "reward_component",
]

# Declared by unsloth 2026.10.9 (Requires-Dist: trl!=0.19.0,<=1.15.0,>=0.18.2). `rollout_func`
# with the `env_mask` extra field exists from TRL 1.0 on, which narrows what this adapter can use.
UNSLOTH_TRL_SPEC = SpecifierSet("!=0.19.0,<=1.15.0,>=0.18.2")
ADAPTER_TRL_SPEC = SpecifierSet(">=1.0")


def trl_version_problem(trl_version: str | None = None) -> str | None:
    """None when the installed (or given) TRL suits both Unsloth and this adapter, else why not."""
    if trl_version is None:
        try:
            trl_version = metadata.version("trl")
        except metadata.PackageNotFoundError:
            return "trl is not installed (pip install 'rollgate[train]')"
    v = Version(trl_version)
    if v not in ADAPTER_TRL_SPEC:
        return f"trl {v} has no rollout_func/env_mask; the Rollgate adapter needs trl{ADAPTER_TRL_SPEC}"
    if v not in UNSLOTH_TRL_SPEC:
        return (
            f"trl {v} is outside the range unsloth declares (trl{UNSLOTH_TRL_SPEC}); "
            f"install trl>=1.0,<=1.15.0 next to unsloth"
        )
    return None


def unsloth_problem() -> str | None:
    """None when Unsloth can train here (a CUDA GPU, unsloth installed, a TRL both accept), else why
    not, in words a user can act on."""
    import torch

    if not torch.cuda.is_available():
        return "Unsloth needs a CUDA GPU and torch sees none (torch.cuda.is_available() is False); use --backend trl"
    if importlib.util.find_spec("unsloth") is None:
        return "unsloth is not installed: pip install unsloth 'trl>=1.0,<=1.15.0' (docs/trainers/unsloth.md)"
    return trl_version_problem() or bitsandbytes_problem()


def bitsandbytes_problem() -> str | None:
    """Unsloth imports without bitsandbytes (it warns that 4-bit is off), but its model loader
    refuses to load any model without it, full fine-tuning included (unsloth 2026.10.9, seen on an
    H200): say so before a run has spent its SFT phase."""
    if importlib.util.find_spec("bitsandbytes") is None:
        return "unsloth's model loader needs bitsandbytes, also for full fine-tuning: pip install bitsandbytes"
    return None


def patch_trl() -> None:
    """Import unsloth, which patches TRL's trainers in place. It must come before trl's first import:
    a trl imported earlier keeps its unpatched classes, so that is an error, not a silent no-op."""
    if "unsloth" in sys.modules:
        return
    if "trl" in sys.modules:
        raise RuntimeError("trl was imported before unsloth, so Unsloth cannot patch it; import unsloth first")
    os.environ.setdefault("UNSLOTH_DISABLE_STATISTICS", "1")  # no network: never phone home
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import unsloth  # noqa: F401


def load_policy(path: Path, *, max_seq_length: int) -> tuple[Any, Any]:
    """A local checkpoint through Unsloth, for full fine-tuning (no LoRA, no quantization: the
    recipe's model is tiny), its tokenizer left as saved (the recipe's chat template is its own).

    In float32, as the TRL backend trains: Unsloth's default for full fine-tuning on a GPU that has
    bfloat16 is bfloat16 weights, whose 8 significant bits round most small steps away (a 5e-5 step
    moves 7% of the weights of SmolLM2's top 2 layers; the rest stay as they were)."""
    import torch

    patch_trl()
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=str(path),
        dtype=torch.float32,
        max_seq_length=max_seq_length,
        load_in_4bit=False,
        full_finetuning=True,
        fix_tokenizer=False,
        use_gradient_checkpointing=False,
    )
    return model, tokenizer
