"""The estimators of evaluation: unbiased pass@k, majority@k, bootstrap confidence intervals
over tasks, and the paired comparison of two runs on the same tasks.

Pure statistics with no Rollgate dependency, kept in core so that both `rollgate eval`
(rollgate.evaluation) and the gateway's evaluation jobs (rollgate.gateway.evals) use one
implementation without the gateway importing a layer above it.

Every random draw comes from a `numpy.random.Generator` seeded by the caller, so a report is
reproducible bit for bit. The formulas are written out in docs/evaluation.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0
CONFIDENCE = 0.95
# Exact majority@k enumerates answer-count vectors; beyond this many it samples subsets instead.
MAJORITY_EXACT_LIMIT = 20_000
MAJORITY_DRAWS = 4000
_CHUNK = 256  # bootstrap resamples per block: bounds memory at _CHUNK x tasks


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k samples drawn without replacement from n is correct), c of n correct:
    1 - C(n-c, k) / C(n, k), computed as a product so large n never overflows."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k > n:
        raise ValueError(f"k={k} is larger than the number of samples n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"c={c} correct samples is outside 0..n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def _vote_score(counts: Sequence[int], correct: Sequence[float]) -> float:
    """Score of one draw: the plurality answer's correctness, ties split evenly (a random
    tie-break in expectation). counts[i] samples voted answer i; no votes scores 0."""
    top = max(counts, default=0)
    if top == 0:
        return 0.0
    winners = [correct[i] for i, x in enumerate(counts) if x == top]
    return sum(winners) / len(winners)


def majority_at_k(answers: Sequence[str | None], correct: Sequence[bool], k: int, *, seed: int = 0) -> float:
    """Expected correctness of the majority vote over k of the n samples drawn without
    replacement. Samples without an answer (None) are drawn but do not vote; an answer's
    correctness is the fraction of its samples that were correct (normally 0 or 1)."""
    n = len(answers)
    if len(correct) != n:
        raise ValueError("answers and correct must have one entry per sample")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k > n:
        raise ValueError(f"k={k} is larger than the number of samples n={n}")
    groups: dict[str, list[bool]] = {}
    abstain = 0
    for a, ok in zip(answers, correct, strict=True):
        if a is None:
            abstain += 1
        else:
            groups.setdefault(a, []).append(bool(ok))
    sizes = [len(v) for v in groups.values()]
    acc = [sum(v) / len(v) for v in groups.values()]
    if not sizes:
        return 0.0
    if _compositions(sizes + [abstain], k) <= MAJORITY_EXACT_LIMIT:
        return _majority_exact(sizes, acc, abstain, k)
    return _majority_sampled(sizes, acc, abstain, k, seed)


def _compositions(sizes: list[int], k: int) -> int:
    """How many count vectors x with 0 <= x_i <= sizes[i] and sum k exist (an upper bound
    is enough: the unconstrained count C(k + m - 1, m - 1))."""
    m = len(sizes)
    return math.comb(k + m - 1, m - 1)


def _majority_exact(sizes: list[int], acc: list[float], abstain: int, k: int) -> float:
    """Sum over count vectors of the multivariate hypergeometric probability times the score."""
    total = math.comb(sum(sizes) + abstain, k)
    result = 0.0
    counts = [0] * len(sizes)

    def walk(i: int, left: int, ways: int) -> None:
        nonlocal result
        if i == len(sizes):
            if left <= abstain:
                result += ways * math.comb(abstain, left) * _vote_score(counts, acc)
            return
        for x in range(min(sizes[i], left) + 1):
            counts[i] = x
            walk(i + 1, left - x, ways * math.comb(sizes[i], x))
        counts[i] = 0

    walk(0, k, 1)
    return result / total


def _majority_sampled(sizes: list[int], acc: list[float], abstain: int, k: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(len(sizes) + 1), sizes + [abstain])  # last label: no answer
    score = 0.0
    for _ in range(MAJORITY_DRAWS):
        drawn = rng.choice(labels, size=k, replace=False)
        counts = np.bincount(drawn, minlength=len(sizes) + 1)[: len(sizes)]
        score += _vote_score(counts.tolist(), acc)
    return score / MAJORITY_DRAWS


@dataclass(frozen=True)
class Estimate:
    """A mean over tasks with its bootstrap percentile interval."""

    value: float
    lo: float
    hi: float
    tasks: int

    def as_dict(self) -> dict[str, float | int | list[float]]:
        return {"value": self.value, "ci": [self.lo, self.hi], "tasks": self.tasks}


def _boot_means(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    n = len(values)
    out = np.empty(resamples)
    for start in range(0, resamples, _CHUNK):
        size = min(_CHUNK, resamples - start)
        idx = rng.integers(0, n, size=(size, n))
        out[start : start + size] = values[idx].mean(axis=1)
    return out


def bootstrap_mean(
    values: Sequence[float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = CONFIDENCE,
) -> Estimate | None:
    """The mean of per-task values and a percentile bootstrap interval from resampling tasks
    with replacement. None when there is no task."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return None
    means = _boot_means(v, resamples, np.random.default_rng(seed))
    alpha = (1.0 - confidence) / 2
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return Estimate(float(v.mean()), float(lo), float(hi), int(v.size))


@dataclass(frozen=True)
class PairedResult:
    """B minus A on the tasks both evaluated."""

    a: float
    b: float
    diff: float
    lo: float
    hi: float
    p_value: float
    tasks: int

    @property
    def verdict(self) -> str:
        # Both must agree: the interval excludes 0 and the randomization test rejects "no
        # difference". With very few tasks the bootstrap interval is too narrow; the test is not.
        if self.p_value < 1.0 - CONFIDENCE and self.lo > 0:
            return "B better"
        if self.p_value < 1.0 - CONFIDENCE and self.hi < 0:
            return "B worse"
        return "no detectable difference"

    def as_dict(self) -> dict[str, object]:
        return {
            "a": self.a,
            "b": self.b,
            "diff": self.diff,
            "ci": [self.lo, self.hi],
            "p_value": self.p_value,
            "tasks": self.tasks,
            "verdict": self.verdict,
        }


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = CONFIDENCE,
) -> PairedResult:
    """Paired comparison of per-task values (a[i] and b[i] are the same task): a percentile
    bootstrap interval of mean(b - a), and a two-sided p-value from the paired sign-flip
    randomization test (under "no difference" each task's difference is as likely negated)."""
    va, vb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if va.shape != vb.shape:
        raise ValueError("a and b must hold one value per common task")
    if va.size == 0:
        raise ValueError("no task in common")
    d = vb - va
    observed = float(d.mean())
    rng = np.random.default_rng(seed)
    means = _boot_means(d, resamples, rng)
    alpha = (1.0 - confidence) / 2
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    extreme = 0
    for start in range(0, resamples, _CHUNK):
        size = min(_CHUNK, resamples - start)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(size, d.size))
        flipped = (signs * d).mean(axis=1)
        extreme += int(np.count_nonzero(np.abs(flipped) >= abs(observed) - 1e-12))
    p = (extreme + 1) / (resamples + 1)
    return PairedResult(float(va.mean()), float(vb.mean()), observed, float(lo), float(hi), min(1.0, p), int(d.size))
