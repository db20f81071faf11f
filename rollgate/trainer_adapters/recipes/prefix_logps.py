"""Per-token log-probabilities of GRPO completions, with the prompt prefix the rows share run once.

Every episode of a recipe's environment starts with the same long context (the system prompt and,
for a model without native tool support, the tool listing); a GRPO batch is 64 such episodes. TRL
runs every row's whole prompt through the model for the loss, and on a CPU that shared prefix is
most of the compute (SmolLM2 on the math environment: about 330 of 460 tokens). Here, per chunk of
rows, the longest token prefix the rows' prompts share runs once (batch 1, with gradients), its
key/value cache is repeated across the chunk, and only each row's own tokens run after it, right
padded and at their true positions. With causal attention and RoPE this is the same computation as
TRL's (same log-probabilities, same gradients, up to float rounding: tests check it), a few times
cheaper. The log-probabilities come from TRL's fused LM head (temperature applied), as TRL's own do.
"""

from __future__ import annotations

from typing import Any

from rollgate.core.hf_compat import cache_kwarg, output_cache
from rollgate.core.tokens import common_prefix


def shared_prefix_logps(
    model: Any,
    input_ids: Any,
    attention_mask: Any,
    logits_to_keep: int,
    *,
    compute_entropy: bool = False,
    chunk: int = 16,
) -> tuple[Any, Any]:
    """(log-probabilities [B, L], entropies [B, L] or None) of the last L = `logits_to_keep`
    columns of `input_ids`, laid out as TRL lays out a batch: prompts left padded, then the
    completions right padded (`attention_mask` 0 on padding). `model` carries TRL's fused LM head."""
    import torch

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
        kwargs: dict[str, Any] = {}
        if p > 0:
            backbone = model.base_model
            pre = backbone(input_ids=prompts[idx[0]][:p].unsqueeze(0), use_cache=True)
            cache = output_cache(pre)
            cache.batch_repeat_interleave(b)
            kwargs[cache_kwarg(backbone)] = cache
            kwargs["position_ids"] = torch.arange(p, p + s).unsqueeze(0).expand(b, -1)
        out = model(input_ids=suffix, attention_mask=attn, labels=labels, fused_lm_head=True, **kwargs)
        # out.log_probs[:, t] scores suffix[t + 1]: row r's completion starts at own[r] - 1
        gather = (torch.tensor(own) - 1).unsqueeze(1) + torch.arange(n).unsqueeze(0)
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
            )
            return logps, entropies, None

    return SharedPrefixGRPOTrainer
