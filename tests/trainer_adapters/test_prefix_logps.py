"""The GRPO loss's shared-prefix log-probabilities (recipes/prefix_logps.py) against TRL's own:
a batch laid out as TRL lays it out (prompts that share a long prefix, left padded; completions
right padded) gives the same per-token log-probabilities, entropies and gradients, on the real
tiny model patched with TRL's real fused LM head."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")


def _batch(vocab: int, pad: int):
    g = torch.Generator().manual_seed(0)
    shared = torch.randint(5, vocab, (40,), generator=g).tolist()
    prompts = [shared + torch.randint(5, vocab, (k,), generator=g).tolist() for k in (3, 9, 1, 6, 12)]
    completions = [torch.randint(5, vocab, (k,), generator=g).tolist() for k in (7, 2, 11, 5, 9)]
    wp, wc = max(map(len, prompts)), max(map(len, completions))
    ids = torch.full((5, wp + wc), pad)
    mask = torch.zeros((5, wp + wc), dtype=torch.long)
    for r, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        ids[r, wp - len(p) : wp] = torch.tensor(p)
        mask[r, wp - len(p) : wp] = 1
        ids[r, wp : wp + len(c)] = torch.tensor(c)
        mask[r, wp : wp + len(c)] = 1
    return ids, mask, wc


@pytest.mark.parametrize(
    ("temperature", "through_trl_head"),
    [(1.0, False), (0.7, False), (0.7, True)],
    ids=["own-head", "own-head-T0.7", "trl-head-T0.7"],
)
def test_shared_prefix_matches_trl_logps_entropies_and_gradients(tiny_model_dir, temperature, through_trl_head):
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from rollgate.trainer_adapters.recipes.prefix_logps import plain_head, shared_prefix_logps

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).float()
    if through_trl_head:
        # a logit scale (1.0: the same logits) sends the rows through TRL's fused head instead of token_logps
        model.config.logit_scale = 1.0
    assert plain_head(model) is not through_trl_head
    add_fused_lm_head(model, temperature=temperature, outputs=("log_probs", "entropy"))
    ids, mask, n = _batch(model.config.vocab_size, 0)

    # TRL's way (GRPOTrainer._get_per_token_logps_and_entropies): the whole rows, prompts included
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-n] = -100
    full = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    want_lp, want_ent = full.log_probs[:, -n:], full.entropy[:, -n:]
    comp = mask[:, -n:].bool()
    (want_lp[comp].sum()).backward()
    want_grad = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()

    got_lp, got_ent = shared_prefix_logps(model, ids, mask, n, compute_entropy=True, chunk=3, temperature=temperature)
    assert got_lp.shape == want_lp.shape == (5, n)
    if not through_trl_head:  # token_logps leaves padding at 0
        assert not got_lp[~comp].any() and not got_ent[~comp].any()
    torch.testing.assert_close(got_lp[comp], want_lp[comp], atol=2e-4, rtol=1e-4)
    torch.testing.assert_close(got_ent[comp], want_ent[comp], atol=2e-4, rtol=1e-4)
    (got_lp[comp].sum()).backward()
    assert want_grad, "no gradient reached the model: the comparison checked nothing"
    for k, g in want_grad.items():
        torch.testing.assert_close(model.get_parameter(k).grad, g, atol=5e-4, rtol=2e-3, msg=k)


def test_rows_without_a_shared_prefix_still_score_every_completion_token(tiny_model_dir):
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from rollgate.trainer_adapters.recipes.prefix_logps import shared_prefix_logps

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).float()
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    ids, mask, n = _batch(model.config.vocab_size, 0)
    first = [int(mask[r].nonzero()[0]) for r in (0, 1)]
    ids[0, first[0]] = ids[1, first[1]] + 1  # rows 0 and 1 (one chunk) share no prefix at all
    with torch.no_grad():
        got, ent = shared_prefix_logps(model, ids, mask, n, chunk=2)
        labels = ids.masked_fill(mask == 0, -100)
        labels[:, :-n] = -100
        want = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True).log_probs[:, -n:]
    comp = mask[:, -n:].bool()
    assert ent is None
    torch.testing.assert_close(got[comp], want[comp], atol=2e-4, rtol=1e-4)


def test_token_logps_in_chunks_matches_one_log_softmax_with_gradients():
    from rollgate.trainer_adapters.recipes.prefix_logps import token_logps

    g = torch.Generator().manual_seed(1)
    head = torch.nn.Linear(8, 50, bias=True)
    hidden = torch.randn(23, 8, generator=g, requires_grad=True)
    targets = torch.randint(0, 50, (23,), generator=g)
    lp, ent = token_logps(hidden, head, targets, 0.5, compute_entropy=True, chunk=5)
    full = torch.log_softmax(head(hidden) / 0.5, -1)
    want_lp, want_ent = full.gather(1, targets[:, None])[:, 0], -(full.exp() * full).sum(-1)
    torch.testing.assert_close(lp, want_lp)
    torch.testing.assert_close(ent, want_ent)
    (grad,) = torch.autograd.grad(lp.sum() + ent.sum(), hidden)
    (want,) = torch.autograd.grad(want_lp.sum() + want_ent.sum(), hidden)
    torch.testing.assert_close(grad, want)
