"""Incremental detokenization: microseconds per generated token, `tokenizers`' DecodeStream (what
the local backend streams with) against decoding a window twice per token in Python (what it did
before, and still does for a tokenizer without a Rust backend), on the same ids, alternating.

    python -m benchmarks.bench_detokenize [--model DIR ...] [--tokens N] [--repeats R]

Each model's tokenizer decodes --tokens ids sampled from text it encoded (realistic merges), R
rounds per path, alternating paths; the median per-token time is reported with its spread and the
ratio. Writes benchmarks/results/bench_detokenize.json."""

from __future__ import annotations

import statistics
import time

from benchmarks import cli
from benchmarks.common import print_table, spread, write_results

TEXT = (
    'The capital of France is Paris. <tool_call>{"name": "calculator", "arguments": '
    '{"expression": "(12 + 7) * 3 / 4"}}</tool_call> Grüße, 世界 🎉 — done.\n'
)


def per_token_us(tok, ids: list[int], stream: bool) -> float:
    from rollgate.model_server.textstream import IncrementalDetokenizer

    detok = IncrementalDetokenizer(tok)
    if not stream:
        detok._stream = None  # the window path
    started = time.perf_counter()
    for i in ids:
        detok.push(i)
    return (time.perf_counter() - started) / len(ids) * 1e6


def main() -> None:
    p = cli.parser(__doc__)
    p.add_argument("--model", action="append", help="model directory (default: the tiny model)")
    p.add_argument("--tokens", type=cli.COUNT, default=2000)
    p.add_argument("--repeats", type=cli.COUNT, default=5)
    args = p.parse_args()
    from transformers import AutoTokenizer

    from rollgate.core.settings import Settings
    from rollgate.model_server.tiny import ensure_tiny_model

    models = args.model or [str(ensure_tiny_model(Settings().model.model_path))]
    rows = []
    for model in models:
        tok = AutoTokenizer.from_pretrained(model)
        base = tok.encode(TEXT, add_special_tokens=False)
        ids = (base * (args.tokens // len(base) + 1))[: args.tokens]
        runs: dict[str, list[float]] = {"decode_stream": [], "window": []}
        for _ in range(args.repeats):  # alternate, so machine noise hits both paths alike
            runs["decode_stream"].append(per_token_us(tok, ids, True))
            runs["window"].append(per_token_us(tok, ids, False))
        med = {k: statistics.median(v) for k, v in runs.items()}
        rows.append(
            {
                "model": model.rstrip("/").rsplit("/", 1)[-1],
                "tokens": len(ids),
                "decode_stream_us_per_token": round(med["decode_stream"], 2),
                "window_us_per_token": round(med["window"], 2),
                "window_over_stream": round(med["window"] / med["decode_stream"], 2),
                "spread": {k: spread(v) for k, v in runs.items()},
            }
        )
    print_table(
        rows,
        ["model", "tokens", "decode_stream_us_per_token", "window_us_per_token", "window_over_stream"],
        "incremental detokenization, µs per token (median)",
    )
    write_results("bench_detokenize", {"repeats": args.repeats, "results": rows})


if __name__ == "__main__":
    main()
