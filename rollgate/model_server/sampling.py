"""Drawing the next token of every row of the running batch at once.

A decode step samples one token for each row. Drawing them one row at a time (a log-softmax, an
exponential and torch.multinomial over the 49,152-token vocabulary per row) cost a quarter of the
local engine's time in a GRPO step on 2 CPU cores; here the whole batch shares one log-softmax,
one exponential and one cumulative sum. Each sampled row draws one uniform number, from its
request's own generator when the request has a seed (else from torch's global one), and takes the
first token whose cumulative probability passes it (inverse CDF): a seeded request draws the same
tokens whatever else shares its batch. Rows with top_p < 1 draw within their nucleus one at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rollgate.model_server.backend import SamplingParams


def sample_rows(
    logits: torch.Tensor, params: Sequence[SamplingParams], generators: Sequence[torch.Generator | None]
) -> tuple[list[int], list[float]]:
    """One token per row of `logits` (rows x vocabulary, float32) and its log-probability under the
    row's temperature (greedy rows: the argmax and its log-probability at temperature 1)."""
    temps = torch.tensor([p.temperature for p in params], dtype=logits.dtype, device=logits.device)
    greedy = temps <= 0.0
    logp = torch.log_softmax(logits / torch.where(greedy, torch.ones_like(temps), temps).unsqueeze(1), -1)
    toks = logp.argmax(-1)
    plain = [i for i, p in enumerate(params) if p.temperature > 0.0 and p.top_p >= 1.0]
    if plain:
        index = torch.tensor(plain, device=logits.device)
        u = torch.stack([torch.rand((), generator=generators[i]) for i in plain]).to(logits.device, logits.dtype)
        toks[index] = inverse_cdf(logp[index].exp(), u)
    for i, p in enumerate(params):
        if p.temperature > 0.0 and p.top_p < 1.0:
            toks[i] = nucleus(logp[i].exp(), p.top_p, generators[i])
    return toks.tolist(), logp.gather(1, toks.unsqueeze(1)).squeeze(1).tolist()


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """For each row, the first token whose cumulative probability exceeds u x the row's total: a
    token of probability 0 is never taken, not even for u = 0."""
    cdf = probs.cumsum(-1)
    total = cdf[:, -1]
    x = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))  # below the total, always
    return torch.searchsorted(cdf, x.unsqueeze(1), right=True).squeeze(1)


def nucleus(probs: torch.Tensor, top_p: float, gen: torch.Generator | None) -> int:
    """One row's token drawn within the smallest set of its most likely tokens reaching top_p."""
    sorted_p, order = torch.sort(probs, descending=True)
    cut = (sorted_p.cumsum(-1) - sorted_p) >= top_p  # keep the smallest set reaching top_p
    sorted_p[cut] = 0.0
    probs = torch.zeros_like(probs).scatter(0, order, sorted_p)
    return int(torch.multinomial(probs.cpu(), 1, generator=gen))
