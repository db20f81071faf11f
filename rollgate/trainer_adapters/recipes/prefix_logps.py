"""Per-token log-probabilities of GRPO completions, with the prompt prefix the rows share run once.

Every episode of a recipe's environment starts with the same long context (the system prompt and,
for a model without native tool support, the tool listing); a GRPO batch is 64 such episodes. TRL
runs every row's whole prompt through the model for the loss, and on a CPU that shared prefix is
most of the compute (SmolLM2 on the math environment: about 330 of 460 tokens). Here, per chunk of
rows, the longest token prefix the rows' prompts share runs once (batch 1, with gradients), its
key/value cache is repeated across the chunk, and only each row's own tokens run after it, right
padded and at their true positions. With causal attention and RoPE this is the same computation as
TRL's (same log-probabilities, same gradients, up to float rounding: tests check it), a few times
cheaper.

The output layer then scores only the completion's real tokens (`token_logps`), in chunks whose
logits are recomputed in the backward pass instead of kept. TRL's fused LM head scores only the
labelled positions on a GPU, but every position of the batch elsewhere (on a CPU: each row's own
prompt tokens and its padding too, about three times the completion tokens of a SmolLM2 GRPO batch,
over a 49k-word vocabulary). A model whose logits are scaled or soft-capped goes through TRL's head.
"""

from __future__ import annotations

from typing import Any

from rollgate.core.hf_compat import cache_kwarg, output_cache
from rollgate.core.tokens import common_prefix

# config fields that scale or cap the logits (TRL's fused head applies them; token_logps does not)
LOGIT_TRANSFORMS = (
    "final_logit_softcapping",
    "logit_scale",
    "output_multiplier",
    "lm_head_multiplier",
    "logits_scaling",
)
HEAD_CHUNK = 1024  # positions whose logits one chunk holds: 1024 x 49k float32 words, 200 MB


def plain_head(model: Any) -> bool:
    """The model's logits are its output layer's, unscaled and uncapped (token_logps applies)."""
    config = model.config.get_text_config()
    return all(getattr(config, name, None) is None for name in LOGIT_TRANSFORMS)


def _chunk_logps(hidden: Any, weight: Any, bias: Any, targets: Any, temperature: float, entropy: bool):
    import torch

    logits = hidden @ weight.t()
    if bias is not None:
        logits = logits + bias
    logps = torch.log_softmax(logits.float() / temperature, dim=-1)
    picked = logps.gather(1, targets.unsqueeze(1)).squeeze(1)
    if not entropy:
        return picked, None
    return picked, -(logps.exp() * logps).sum(-1)


def token_logps(
    hidden: Any, head: Any, targets: Any, temperature: float, *, compute_entropy: bool = False, chunk: int = HEAD_CHUNK
) -> tuple[Any, Any]:
    """(log-probabilities [N], entropies [N] or None) of `targets` [N] under the output layer `head`
    applied to `hidden` [N, d] at `temperature`. With gradients on, each chunk's logits are
    recomputed in the backward pass (torch.utils.checkpoint), so memory holds one chunk's."""
    import torch
    from torch.utils.checkpoint import checkpoint

    weight, bias = head.weight, head.bias
    lps, ents = [], []
    for start in range(0, hidden.shape[0], chunk):
        args = (
            hidden[start : start + chunk],
            weight,
            bias,
            targets[start : start + chunk],
            temperature,
            compute_entropy,
        )
        if torch.is_grad_enabled():
            lp, ent = checkpoint(_chunk_logps, *args, use_reentrant=False)
        else:
            lp, ent = _chunk_logps(*args)
        lps.append(lp)
        ents.append(ent)
    if not lps:
        empty = hidden.new_zeros((0,), dtype=torch.float32)
        return empty, (empty if compute_entropy else None)
    return torch.cat(lps), (torch.cat(ents) if compute_entropy else None)


def after_prefix(model: Any, prefix: Any, rows: int, width: int) -> dict[str, Any]:
    """The keyword arguments that run `rows` suffixes of `width` tokens after `prefix` (1-D token
    ids the rows share): the prefix runs here once (batch 1, with gradients), its key/value cache
    repeated across the rows, and the suffixes' true positions. Empty for an empty prefix. SFT's
    loss and GRPO's log-probabilities both run their batches this way."""
    import torch

    p = len(prefix)
    if p == 0:
        return {}
    backbone = model.base_model
    cache = output_cache(backbone(input_ids=prefix.unsqueeze(0), use_cache=True))
    cache.batch_repeat_interleave(rows)
    positions = torch.arange(p, p + width, device=prefix.device).unsqueeze(0).expand(rows, -1)
    return {cache_kwarg(backbone): cache, "position_ids": positions}


def shared_prefix_logps(
    model: Any,
    input_ids: Any,
    attention_mask: Any,
    logits_to_keep: int,
    *,
    compute_entropy: bool = False,
    chunk: int = 16,
    temperature: float = 1.0,
) -> tuple[Any, Any]:
    """(log-probabilities [B, L], entropies [B, L] or None; 0 on padding) of the last L =
    `logits_to_keep` columns of `input_ids`, laid out as TRL lays out a batch: prompts left padded,
    then the completions right padded (`attention_mask` 0 on padding), at `temperature`. A model
    whose logits are transformed (plain_head false) must carry TRL's fused LM head, patched with
    the same temperature."""
    import torch

    plain = plain_head(model)

    rows, width = input_ids.shape
    n = logits_to_keep
    w = width - n
    prompts = [input_ids[i, :w][attention_mask[i, :w].bool()] for i in range(rows)]
    logps, entropies = [], []
    for start in range(0, rows, chunk):
        idx = range(start, min(rows, start + chunk))
        plist = [prompts[i].tolist() for i in idx]
        # Keep at least one prompt token out of the prefix: the first completion token's
        # log-probability comes from the suffix's logits.
        p = min(common_prefix(plist), min(len(x) for x in plist) - 1)
        own = [len(x) - p for x in plist]
        b, s = len(plist), max(own) + n
        suffix = torch.zeros((b, s), dtype=input_ids.dtype)
        labels = torch.full((b, s), -100, dtype=input_ids.dtype)
        attn = torch.zeros((b, p + s), dtype=attention_mask.dtype)
        for r, i in enumerate(idx):
            a = own[r]
            completion, cmask = input_ids[i, w:], attention_mask[i, w:]
            suffix[r, :a] = prompts[i][p:]
            suffix[r, a : a + n] = completion
            labels[r, a : a + n] = completion.masked_fill(cmask == 0, -100)
            attn[r, : p + a] = 1
            attn[r, p + a : p + a + n] = cmask
        kwargs = after_prefix(model, prompts[idx[0]][:p], b, s)
        # position t of the suffix scores suffix[t + 1]: row r's completion starts at own[r] - 1
        gather = (torch.tensor(own) - 1).unsqueeze(1) + torch.arange(n).unsqueeze(0)
        if plain:
            out = model.base_model(input_ids=suffix, attention_mask=attn, use_cache=False, **kwargs)
            hidden = out.last_hidden_state
            targets = labels.gather(1, gather + 1)  # [b, n]: the completion, -100 on its padding
            rows_at, cols_at = (targets != -100).nonzero(as_tuple=True)
            lp, ent = token_logps(
                hidden[rows_at, gather[rows_at, cols_at]],
                model.get_output_embeddings(),
                targets[rows_at, cols_at],
                temperature,
                compute_entropy=compute_entropy,
            )
            logps.append(torch.zeros((b, n), dtype=lp.dtype).index_put((rows_at, cols_at), lp))
            if compute_entropy:
                entropies.append(torch.zeros((b, n), dtype=ent.dtype).index_put((rows_at, cols_at), ent))
            continue
        out = model(input_ids=suffix, attention_mask=attn, labels=labels, fused_lm_head=True, **kwargs)
        logps.append(out.log_probs.gather(1, gather))
        if compute_entropy:
            entropies.append(out.entropy.gather(1, gather))
    return torch.cat(logps, dim=0), (torch.cat(entropies, dim=0) if compute_entropy else None)


def shared_prefix_trainer(base: type) -> type:
    """A subclass of TRL's GRPOTrainer (`base`, passed in so that importing this module never
    imports TRL) whose per-token log-probabilities share the prompt prefix (see the module
    docstring); multimodal and mixture-of-experts inputs go to TRL's own code."""

    class SharedPrefixGRPOTrainer(base):
        prefix_chunk = 16

        def _get_per_token_logps_and_entropies(
            self,
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size=None,
            compute_entropy=False,
            compute_aux_loss=False,
            **extra,
        ):
            if compute_aux_loss or any(v is not None for v in extra.values()):
                return super()._get_per_token_logps_and_entropies(
                    model,
                    input_ids,
                    attention_mask,
                    logits_to_keep,
                    batch_size=batch_size,
                    compute_entropy=compute_entropy,
                    compute_aux_loss=compute_aux_loss,
                    **extra,
                )
            logps, entropies = shared_prefix_logps(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                compute_entropy=compute_entropy,
                chunk=batch_size or self.prefix_chunk,
                temperature=self.temperature,
            )
            return logps, entropies, None

    return SharedPrefixGRPOTrainer
