"""Reward composition: components always sum to the reward."""

from __future__ import annotations

import pytest

from rollgate.verifiers.compose import gate, weighted_sum


def test_weighted_sum_components_sum_to_the_reward():
    r = weighted_sum({"answer": 1.0, "format": 0.5}, {"answer": 0.8, "format": 0.2}, metrics={"n": 1})
    assert r.reward == pytest.approx(0.9)
    assert r.reward_components == pytest.approx({"answer": 0.8, "format": 0.1})
    assert r.metrics == {"n": 1}
    thirds = weighted_sum({f"c{i}": 1.0 for i in range(3)}, {f"c{i}": 1 / 3 for i in range(3)})
    assert sum(thirds.reward_components.values()) == pytest.approx(thirds.reward) and thirds.reward == pytest.approx(
        1.0
    )
    assert weighted_sum({"a": 0.25}).reward == 0.25  # default weight 1


def test_weighted_sum_rejects_bad_terms():
    with pytest.raises(ValueError, match="no score"):
        weighted_sum({"a": 1.0}, {"b": 1.0})
    with pytest.raises(ValueError, match="finite"):
        weighted_sum({"a": float("nan")})


def test_gate_zeroes_every_component_but_keeps_their_names():
    inner = weighted_sum({"a": 1.0, "b": 0.5})
    passed = gate(True, inner, name="safe")
    assert passed.reward == 1.5 and passed.metrics["safe"] is True
    failed = gate(False, inner, name="safe")
    assert failed.reward == 0.0 and failed.reward_components == {"a": 0.0, "b": 0.0}
    assert failed.metrics["safe"] is False
