"""The batch sampler (model_server/sampling.py): it draws from each row's own distribution, a
seeded row draws the same tokens whatever shares its batch, zero-probability tokens are never
drawn, and the log-probabilities are those of the row's temperature."""

from __future__ import annotations

import math

import pytest
import torch

from rollgate.model_server.backend import SamplingParams
from rollgate.model_server.sampling import inverse_cdf, sample_rows


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_rows_draw_from_their_own_distributions_at_their_temperatures():
    torch.manual_seed(0)
    probs = [torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0]), torch.tensor([0.0, 0.1, 0.0, 0.2, 0.7])]
    temps = [1.0, 0.5]
    n = 4000
    logits = torch.stack([probs[i % 2].log() for i in range(n)])
    params = [SamplingParams(max_tokens=1, temperature=temps[i % 2]) for i in range(n)]
    toks, lps = sample_rows(logits, params, [None] * n)
    for row in (0, 1):
        want = probs[row] ** (1 / temps[row])
        want = want / want.sum()
        drawn = toks[row::2]
        for tok in range(5):
            freq = drawn.count(tok) / len(drawn)
            sd = math.sqrt(want[tok] * (1 - want[tok]) / len(drawn))
            assert abs(freq - float(want[tok])) <= 4 * sd + 1e-9, (row, tok, freq, float(want[tok]))
        for tok, lp in zip(drawn, lps[row::2], strict=True):
            assert lp == pytest.approx(math.log(want[tok]), abs=1e-5)


def test_a_seeded_row_draws_the_same_tokens_alone_or_among_others():
    torch.manual_seed(1)
    logits = torch.randn(9, 300)
    params = [SamplingParams(max_tokens=1, temperature=1.0 + 0.1 * i) for i in range(9)]
    alone = [sample_rows(logits[i : i + 1], [params[i]], [seeded(i)])[0][0] for i in range(9)]
    for _ in range(3):
        together, _ = sample_rows(logits, params, [seeded(i) for i in range(9)])
        assert together == alone
    # and the order of the batch does not matter either
    order = [8, 3, 0, 5, 1, 7, 2, 6, 4]
    shuffled, _ = sample_rows(logits[order], [params[i] for i in order], [seeded(i) for i in order])
    assert shuffled == [alone[i] for i in order]


def test_greedy_rows_take_the_argmax_with_its_log_probability_at_temperature_1():
    logits = torch.randn(4, 50)
    params = [SamplingParams(max_tokens=1, temperature=0.0 if i % 2 else 0.7) for i in range(4)]
    toks, lps = sample_rows(logits, params, [seeded(i) for i in range(4)])
    for i in (1, 3):
        assert toks[i] == int(logits[i].argmax())
        assert lps[i] == pytest.approx(float(torch.log_softmax(logits[i], -1)[toks[i]]), abs=1e-6)
    for i in (0, 2):
        assert lps[i] == pytest.approx(float(torch.log_softmax(logits[i] / 0.7, -1)[toks[i]]), abs=1e-6)


def test_a_token_of_probability_zero_is_never_drawn_not_even_at_the_ends_of_the_unit_interval():
    probs = torch.tensor([[0.0, 0.0, 0.6, 0.0, 0.4, 0.0]] * 4)
    u = torch.tensor([0.0, 0.6, 0.9999999, 1.0])
    assert inverse_cdf(probs, u).tolist() == [2, 4, 4, 4]
    masked = torch.full((64, 10), float("-inf"))
    masked[:, 7] = 0.0  # a guide allowing one token only
    toks, lps = sample_rows(masked, [SamplingParams(max_tokens=1)] * 64, [None] * 64)
    assert set(toks) == {7} and set(lps) == {0.0}


def test_top_p_rows_keep_to_their_nucleus_beside_plain_rows():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]] * 200)
    params = [SamplingParams(max_tokens=1, temperature=1.0, top_p=0.5 if i % 2 else 1.0) for i in range(200)]
    toks, _ = sample_rows(logits, params, [seeded(i) for i in range(200)])
    assert set(toks[1::2]) == {0}  # the nucleus of 0.5 is the top token (p = 0.64)
    assert len(set(toks[0::2])) > 1
