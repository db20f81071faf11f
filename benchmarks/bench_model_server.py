"""Local backend throughput on the tiny model: generated tokens/s at concurrency 1, 16 and 64, and
the ratio to concurrency 1 (continuous batching should give >= 5x at 64).

    python -m benchmarks.bench_model_server [--model DIR] [--tokens N] [--requests-per-slot K]
                                            [--repeats R] [--threads T]

Every request generates exactly --tokens tokens (metadata `rollgate_ignore_eos`), so each level
does the same work per request whatever the model samples. A level runs a fixed number of
requests (K x concurrency, at least 8) through `concurrency` closed-loop workers; each level is
repeated R times and the median tokens/s is reported with its spread. Prints a table and writes
benchmarks/results/bench_model_server.json."""

from __future__ import annotations

import asyncio

from benchmarks import cli
from benchmarks.common import print_table, spread, write_results
from benchmarks.measure import closed_loop, median_of

LEVELS = (1, 16, 64)


async def run_level(service, concurrency: int, requests: int, tokens: int, offset: int) -> dict:
    async def one(i: int) -> int:
        resp = await service.create(
            {
                "model": "rollgate-tiny",
                "input": f"Request {i}: what is {i} + 1?",
                "max_output_tokens": tokens,
                "temperature": 1.0,
                "seed": i,
                "metadata": {"rollgate_training": "true", "rollgate_ignore_eos": "true"},
            }
        )
        return resp["usage"]["output_tokens"]

    counts, elapsed = await closed_loop(one, concurrency=concurrency, requests=requests, offset=offset)
    produced = sum(counts)
    if produced != requests * tokens:  # ignore_eos makes the work exact; anything else is a bug
        raise RuntimeError(f"expected {requests * tokens} tokens at concurrency {concurrency}, got {produced}")
    return {"tokens": produced, "seconds": elapsed, "tokens_per_s": produced / elapsed}


async def main_async(args) -> dict:
    import torch

    from rollgate.model_server.local import LocalBackend
    from rollgate.model_server.service import ModelService

    torch.set_num_threads(args.threads)
    model_dir = cli.model_dir(args.model)
    backend = LocalBackend.from_pretrained(model_dir, device=args.device, max_batch_size=max(LEVELS))
    service = ModelService(backend)
    try:
        await run_level(service, 4, 4, args.tokens, offset=10**6)  # warm-up (allocator, kernels)
        rows = []
        for c in LEVELS:
            requests = max(8, args.requests_per_slot * c)
            runs = [
                await run_level(service, c, requests, args.tokens, offset=r * requests) for r in range(args.repeats)
            ]
            tps = spread([r["tokens_per_s"] for r in runs])
            rows.append(
                {
                    "concurrency": c,
                    "requests": requests,
                    "tokens": runs[0]["tokens"],
                    "seconds_median": median_of(runs, "seconds", 3),
                    "tokens_per_s": round(tps["median"], 1),
                    "tokens_per_s_min": round(tps["min"], 1),
                    "tokens_per_s_max": round(tps["max"], 1),
                    "spread_pct": round(100 * (tps["max"] - tps["min"]) / tps["median"], 1),
                    "runs_tokens_per_s": [round(r["tokens_per_s"], 1) for r in runs],
                }
            )
        base = rows[0]["tokens_per_s"]
        for row in rows:
            row["ratio_vs_1"] = round(row["tokens_per_s"] / base, 2)
        return {
            "model": "tiny",
            "max_output_tokens": args.tokens,
            "ignore_eos": True,
            "repeats": args.repeats,
            "torch_threads": args.threads,
            "device": backend.engine.device.type,
            "engine_stats": dict(backend.engine.stats),
            "results": rows,
        }
    finally:
        await backend.aclose()


def main() -> int:
    p = cli.parser(__doc__, whole_doc=True)
    cli.add_model_flags(p)
    p.add_argument("--tokens", type=cli.COUNT, default=64, help="output tokens per request (exact: ignore_eos)")
    p.add_argument(
        "--requests-per-slot",
        type=cli.at_least(2),
        default=2,
        help="requests per level = this x concurrency (at least 8)",
    )
    p.add_argument("--repeats", type=cli.COUNT, default=3, help="runs per level; the median is reported")
    args = p.parse_args()
    report = asyncio.run(main_async(args))
    print_table(
        report["results"],
        [
            "concurrency",
            "requests",
            "tokens",
            "seconds_median",
            "tokens_per_s",
            "tokens_per_s_min",
            "tokens_per_s_max",
            "spread_pct",
            "ratio_vs_1",
        ],
        title=f"local backend, tiny model, {args.tokens} tokens per request, median of {args.repeats}",
    )
    path = write_results("bench_model_server", report)
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
