"""The GRPO loss's log-probabilities on a CPU: TRL's fused LM head against token_logps.

    python -m benchmarks.bench_grpo_loss --model ~/.cache/rollgate/models/smollm2-135m-instruct

A batch shaped like a step of the `smollm2-math` recipe (64 rows; a shared prompt prefix of 330
tokens, each row's own 110-150 tokens, completions of 40-192 tokens right padded to the longest),
random token ids (the arithmetic does not depend on them). Each repeat runs the loss's forward and
backward (`shared_prefix_logps`, the recipe's `trainable` weights only) once each way,
alternating which goes first: through TRL's fused LM head, which on a CPU scores every position
of the suffix (each row's own prompt tokens and its padding too), and through token_logps, which
scores only the completion's real tokens. The two give the same log-probabilities (checked each
repeat, and in tests/trainer_adapters/test_prefix_logps.py). Results go to
benchmarks/results/bench_grpo_loss.json."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

from benchmarks import cli, common


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = cli.parser(__doc__, whole_doc=True)
    p.add_argument("--model", help="model directory (default: the tiny model)")
    p.add_argument("--rows", type=cli.COUNT, default=64)
    p.add_argument("--prefix", type=cli.COUNT, default=330, help="tokens every row's prompt shares")
    p.add_argument("--completion", type=cli.COUNT, default=192, help="the longest completion (logits_to_keep)")
    p.add_argument("--repeats", type=cli.COUNT, default=3)
    p.add_argument("--trainable", default="final_norm", help="the weights the loss's gradient reaches")
    p.add_argument("--threads", type=cli.COUNT, default=2, help="torch intra-op threads")
    return p.parse_args(argv)


def batch(rows: int, prefix: int, completion: int, vocab: int) -> tuple[Any, Any, int]:
    """TRL's layout: prompts left padded, completions right padded to `completion`."""
    import torch

    g = torch.Generator().manual_seed(0)
    shared = torch.randint(5, vocab, (prefix,), generator=g)
    own = torch.randint(110, 151, (rows,), generator=g).tolist()
    lengths = torch.randint(min(40, completion), completion + 1, (rows,), generator=g).tolist()
    lengths[0] = completion
    wp = prefix + max(own)
    ids = torch.zeros((rows, wp + completion), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r in range(rows):
        prompt = torch.cat([shared, torch.randint(5, vocab, (own[r],), generator=g)])
        ids[r, wp - len(prompt) : wp] = prompt
        mask[r, wp - len(prompt) : wp] = 1
        ids[r, wp : wp + lengths[r]] = torch.randint(5, vocab, (lengths[r],), generator=g)
        mask[r, wp : wp + lengths[r]] = 1
    return ids, mask, completion


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    args = parse_args(argv)
    common.exit_on_sigterm()
    import torch
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from rollgate.trainer_adapters.recipes.prefix_logps import shared_prefix_logps
    from rollgate.trainer_adapters.recipes.trainable import restrict_trainable

    torch.set_num_threads(args.threads)
    path = cli.model_dir(args.model)
    model = AutoModelForCausalLM.from_pretrained(path).float()
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    restrict_trainable(model, args.trainable)
    model.train()
    ids, mask, n = batch(args.rows, args.prefix, args.completion, model.config.vocab_size)
    comp = mask[:, -n:].bool()

    def run(trl_head: bool) -> tuple[float, Any]:
        # a logit scale of 1.0 (the same logits) sends shared_prefix_logps through TRL's fused head
        model.config.logit_scale = 1.0 if trl_head else None
        model.zero_grad(set_to_none=True)
        started = time.perf_counter()
        lp, _ = shared_prefix_logps(model, ids, mask, n, compute_entropy=True)
        (-(lp * comp).sum() / comp.sum()).backward()
        return time.perf_counter() - started, lp.detach()

    seconds: dict[str, list[float]] = {"trl_fused_head": [], "token_logps": []}
    worst = 0.0
    for i in range(args.repeats):
        order = [True, False] if i % 2 == 0 else [False, True]
        got = {}
        for trl_head in order:
            s, lp = run(trl_head)
            seconds["trl_fused_head" if trl_head else "token_logps"].append(round(s, 2))
            got[trl_head] = lp
        worst = max(worst, float((got[True] - got[False])[comp].abs().max()))
        print(
            f"repeat {i}: TRL head {seconds['trl_fused_head'][-1]:.1f}s, token_logps {seconds['token_logps'][-1]:.1f}s"
        )
    old, new = statistics.median(seconds["trl_fused_head"]), statistics.median(seconds["token_logps"])
    print(
        f"\n{args.rows} rows, {int(comp.sum())} completion tokens (padded to {args.rows * n}): "
        f"median {old:.1f}s -> {new:.1f}s, {old / new:.2f}x (largest log-prob difference {worst:.1e})"
    )
    path_out = common.write_results(
        "bench_grpo_loss",
        {
            "model": os.path.basename(os.path.normpath(path)),
            "rows": args.rows,
            "prefix": args.prefix,
            "completion": args.completion,
            "completion_tokens": int(comp.sum()),
            "trainable": args.trainable,
            "threads": args.threads,
            "seconds": seconds,
            "median_ratio": round(old / new, 3),
            "max_abs_logp_difference": worst,
        },
    )
    print(f"wrote {path_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
