"""Evaluation metrics over tasks: the one reduction that `rollgate eval` (rollgate.evaluation) and
the gateway's evaluation jobs (rollgate.gateway.evals) share. A task is reduced to its samples'
rewards, correctness and answers (`TaskResult`); every metric is a mean over tasks with a
bootstrap interval (rollgate.core.stats), and failures are counted apart, never as wrong answers."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rollgate.core.stats import CONFIDENCE, DEFAULT_RESAMPLES, DEFAULT_SEED, bootstrap_mean, majority_at_k, pass_at_k


@dataclass(frozen=True)
class MetricConfig:
    k: int  # samples per task
    pass_k: tuple[int, ...]
    threshold: float = 1.0
    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED

    def as_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "pass_k": list(self.pass_k),
            "threshold": self.threshold,
            "correct": f"reward >= {self.threshold:g}",
            "bootstrap": {"resamples": self.resamples, "seed": self.seed, "confidence": CONFIDENCE, "over": "tasks"},
        }


def default_pass_k(k: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to k, and k itself."""
    out, x = [], 1
    while x < k:
        out.append(x)
        x *= 2
    out.append(k)
    return tuple(out)


@dataclass
class TaskResult:
    """One task's samples, reduced: what every metric is a mean of."""

    env: str
    task_id: str
    tags: dict[str, str]
    samples: int = 0
    rewards: list[float] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    answers: list[str | None] = field(default_factory=list)
    failures: Counter = field(default_factory=Counter)

    @property
    def valid(self) -> int:
        return len(self.rewards)

    @property
    def mean_reward(self) -> float:
        return sum(self.rewards) / len(self.rewards)

    @property
    def has_answers(self) -> bool:
        return any(a is not None for a in self.answers)

    def pass_at(self, k: int) -> float:
        return pass_at_k(self.valid, sum(self.correct), k)

    def majority_at(self, k: int, seed: int) -> float:
        return majority_at_k(self.answers, self.correct, k, seed=seed)


def _estimate(values: Sequence[float], cfg: MetricConfig) -> dict[str, Any] | None:
    est = bootstrap_mean(values, resamples=cfg.resamples, seed=cfg.seed)
    return est.as_dict() if est is not None else None


def metrics_of(tasks: Sequence[TaskResult], cfg: MetricConfig, *, majority: bool) -> dict[str, Any]:
    """Means over tasks with intervals. A task enters pass@k (and majority@k) only with at least
    k valid samples: fewer cannot give the unbiased estimate; such tasks are counted apart."""
    scored = [t for t in tasks if t.valid]
    out: dict[str, Any] = {"mean_reward": _estimate([t.mean_reward for t in scored], cfg)}
    for k in cfg.pass_k:
        out[f"pass@{k}"] = _estimate([t.pass_at(k) for t in scored if t.valid >= k], cfg)
    if majority:
        for k in cfg.pass_k:
            out[f"majority@{k}"] = _estimate([t.majority_at(k, cfg.seed) for t in scored if t.valid >= k], cfg)
    return out


def counts_of(tasks: Sequence[TaskResult], k: int) -> dict[str, Any]:
    samples = sum(t.samples for t in tasks)
    valid = sum(t.valid for t in tasks)
    failures: Counter = Counter()
    for t in tasks:
        failures.update(t.failures)
    return {
        "tasks": len(tasks),
        "samples": samples,
        "valid_samples": valid,
        "failed_samples": samples - valid,
        "failures": dict(sorted(failures.items())),
        "failure_fraction": (samples - valid) / samples if samples else 0.0,
        "tasks_short_of_k": sum(t.valid < k for t in tasks),
        "tasks_without_valid_samples": sum(t.valid == 0 for t in tasks),
    }


def by_tag(tasks: Sequence[TaskResult], cfg: MetricConfig) -> dict[str, Any]:
    groups: dict[str, dict[str, list[TaskResult]]] = defaultdict(lambda: defaultdict(list))
    for t in tasks:
        for name, value in t.tags.items():
            groups[name][value].append(t)
    small = MetricConfig(k=cfg.k, pass_k=(1, cfg.k), threshold=cfg.threshold, resamples=cfg.resamples, seed=cfg.seed)
    out: dict[str, Any] = {}
    for name in sorted(groups):
        out[name] = {
            value: {"tasks": len(ts), **metrics_of(ts, small, majority=False)}
            for value, ts in sorted(groups[name].items())
        }
    return out


def env_blocks(
    tasks: Sequence[TaskResult],
    cfg: MetricConfig,
    *,
    envs: Sequence[str] | None = None,
    expected_tasks: dict[str, int] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """-> (per-environment blocks, the overall block) of a report."""
    names = list(envs) if envs is not None else sorted({t.env for t in tasks})
    per_env: dict[str, Any] = {}
    majority_everywhere = True
    for name in names:
        ts = [t for t in tasks if t.env == name]
        majority = any(t.has_answers for t in ts)
        majority_everywhere &= majority
        block = {**counts_of(ts, cfg.k), "majority_available": majority, **metrics_of(ts, cfg, majority=majority)}
        if expected_tasks is not None:
            block["tasks_not_run"] = max(0, expected_tasks.get(name, 0) - len(ts))
        block["by_tag"] = by_tag(ts, cfg)
        per_env[name] = block
    overall = {**counts_of(tasks, cfg.k), **metrics_of(tasks, cfg, majority=majority_everywhere and bool(tasks))}
    return per_env, overall
