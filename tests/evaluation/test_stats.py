"""The estimators against brute force: pass@k and majority@k enumerate every k-subset of the
samples; the bootstrap interval is checked for coverage on a synthetic population whose true
mean is known; the paired comparison on differences known by construction."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from rollgate.core import stats
from rollgate.core.stats import bootstrap_mean, majority_at_k, paired_bootstrap, pass_at_k


def brute_pass_at_k(n: int, c: int, k: int) -> float:
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


def brute_majority(answers, correct, k: int) -> float:
    subsets = list(itertools.combinations(range(len(answers)), k))
    total = 0.0
    for s in subsets:
        votes = Counter(answers[i] for i in s if answers[i] is not None)
        if not votes:
            continue
        top = max(votes.values())
        winners = [a for a, v in votes.items() if v == top]
        # an answer's correctness: the share of its samples (all of them) that were correct
        acc = {a: np.mean([correct[i] for i in range(len(answers)) if answers[i] == a]) for a in winners}
        total += sum(acc.values()) / len(winners)
    return total / len(subsets)


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_equals_brute_force_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_is_stable_for_large_n():
    # C(1000, 500) overflows a float; the product form does not.
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001)
    assert pass_at_k(1000, 10, 500) == pytest.approx(1 - np.prod([(500 - i) / (1000 - i) for i in range(10)]))


def test_pass_at_k_refuses_k_above_n():
    with pytest.raises(ValueError, match="k=5 is larger than the number of samples n=4"):
        pass_at_k(4, 1, 5)


MAJORITY_CASES = [
    (["4", "4", "5", None, "4", "6"], [True, True, False, False, True, False]),
    (["1", "2", "1", "2", "3"], [True, False, True, False, False]),  # ties between right and wrong
    ([None, None, "7", "8"], [False, False, False, True]),
    (["a", "b", "c", "d", "e", "f", "g"], [True] + [False] * 6),
]


@pytest.mark.parametrize(("answers", "correct"), MAJORITY_CASES)
def test_majority_at_k_equals_brute_force_enumeration(answers, correct):
    for k in range(1, len(answers) + 1):
        assert majority_at_k(answers, correct, k) == pytest.approx(brute_majority(answers, correct, k), abs=1e-12)


def test_majority_at_k_sampled_path_agrees_with_exact(monkeypatch):
    answers, correct = MAJORITY_CASES[0]
    exact = majority_at_k(answers, correct, 3)
    monkeypatch.setattr(stats, "MAJORITY_EXACT_LIMIT", 0)  # force the Monte Carlo path
    assert majority_at_k(answers, correct, 3, seed=1) == pytest.approx(exact, abs=0.03)


def test_bootstrap_interval_covers_the_true_mean_about_95_percent_of_the_time():
    """300 synthetic evaluations: 60 tasks, each with a true success rate drawn from U(0, 1)
    (so the population pass@1 is 0.5), 4 samples per task; the interval over tasks should hold
    0.5 in about 95% of them (binomial sd over 300 runs is ~1.3 points)."""
    rng = np.random.default_rng(12345)
    covered = 0
    runs = 300
    for r in range(runs):
        p = rng.uniform(0, 1, size=60)
        c = rng.binomial(4, p)
        est = bootstrap_mean(c / 4, resamples=1000, seed=r)
        covered += est.lo <= 0.5 <= est.hi
    assert 0.90 <= covered / runs <= 0.99, covered / runs


def test_bootstrap_is_reproducible_for_a_seed_and_degenerate_for_constant_values():
    values = [0.0, 1.0, 1.0, 0.5, 0.25]
    assert bootstrap_mean(values, seed=3) == bootstrap_mean(values, seed=3)
    const = bootstrap_mean([0.5] * 10)
    assert (const.value, const.lo, const.hi) == (0.5, 0.5, 0.5)
    assert bootstrap_mean([]) is None


def test_paired_identical_runs_show_no_difference():
    a = [1.0, 0.0, 0.5, 1.0, 0.0] * 8
    result = paired_bootstrap(a, list(a))
    assert (result.diff, result.lo, result.hi, result.p_value) == (0.0, 0.0, 0.0, 1.0)
    assert result.verdict == "no detectable difference"


def test_paired_known_subset_difference_is_detected_both_ways():
    a = [0.0] * 20
    b = [1.0] * 10 + [0.0] * 10  # B is right on a known half
    better = paired_bootstrap(a, b)
    assert better.diff == 0.5 and better.lo > 0 and better.p_value < 0.01
    assert better.verdict == "B better"
    assert paired_bootstrap(b, a).verdict == "B worse"


def test_paired_single_task_is_never_significant():
    # One task's interval is a point; the randomization test still says p = 1.
    result = paired_bootstrap([0.0], [1.0])
    assert result.p_value == 1.0 and result.verdict == "no detectable difference"


def test_the_worked_example_of_the_docs():
    # docs/evaluation.md: answers 7, 7, 9 and none; 7 is right.
    assert pass_at_k(4, 2, 1) == 0.5
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)
    assert pass_at_k(4, 2, 4) == 1.0
    assert majority_at_k(["7", "7", "9", None], [True, True, False, False], 2) == pytest.approx(4 / 6)
