"""Unsloth: it patches TRL's GRPOTrainer in place (`from unsloth import FastLanguageModel` before
importing trl), keeping the `rollout_func` / `env_mask` contract, so the TRL adapter is used as is.
What differs is the TRL versions Unsloth accepts; this module checks them before a run starts.

Unsloth needs a CUDA GPU even to import, so nothing here imports it.
"""

from __future__ import annotations

from importlib import metadata

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
