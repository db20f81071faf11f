"""Composition of reward terms into one VerifyResult whose components sum to the reward.

- `weighted_sum({"answer": 1.0, "format": 0.5}, {"answer": 0.8, "format": 0.2})`
  -> reward 0.9, components {"answer": 0.8, "format": 0.1}.
- `gate(passed, result)`: a hard requirement; when it fails every component becomes 0 (the
  component names stay, so dashboards keep one column per term).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rollgate.core.schemas import VerifyResult


def weighted_sum(
    scores: Mapping[str, float], weights: Mapping[str, float] | None = None, *, metrics: dict[str, Any] | None = None
) -> VerifyResult:
    """Each component is weight * score (weight 1 where none is given); the reward is their sum."""
    weights = weights or {}
    unknown = set(weights) - set(scores)
    if unknown:
        raise ValueError(f"weights name terms that have no score: {', '.join(sorted(unknown))}")
    components: dict[str, float] = {}
    for name, score in scores.items():
        value = float(score) * float(weights.get(name, 1.0))
        if not math.isfinite(value):
            raise ValueError(f"reward term {name!r} is not a finite number ({score!r})")
        components[name] = value
    return VerifyResult(
        reward=math.fsum(components.values()), reward_components=components, metrics=dict(metrics or {})
    )


def gate(passed: bool, result: VerifyResult, *, name: str = "gate") -> VerifyResult:
    """`result` when `passed`, else the same components at 0 and reward 0 (metrics[name] says why)."""
    metrics = {**result.metrics, name: bool(passed)}
    if passed:
        return result.model_copy(update={"metrics": metrics})
    zeroed = {k: 0.0 for k in (result.reward_components or {})}
    return VerifyResult(reward=0.0, reward_components=zeroed or None, metrics=metrics)
