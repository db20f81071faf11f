"""The cost of a forced tool_choice on the local backend: wall time per generated token with the
call constrained ("required", a named function: the logits of every step masked by the format's
prefix, the call's JSON schema and its suffix) against free decoding, on the tiny model.

    python -m benchmarks.bench_tool_choice [--model DIR] [--requests N] [--repeats R] [--threads T]

Free decoding generates exactly --tokens tokens per request (metadata `rollgate_ignore_eos`); a
forced call ends when its call is complete, so each mode reports its own token count and the time
per token. Concurrency 1 and 8 (one batch). The first forced request also builds the tokenizer's
token index and the schema's masks: reported apart as `first_forced_s`. Prints a table and writes
benchmarks/results/bench_tool_choice.json."""

from __future__ import annotations

import asyncio
import time

from benchmarks import cli
from benchmarks.common import print_table, spread, write_results
from benchmarks.measure import closed_loop

CALC = {
    "type": "function",
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
}
WEATHER = {
    "type": "function",
    "name": "weather",
    "description": "The forecast for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
}
MODES = {
    "free": "auto",
    "required": "required",
    "named": {"type": "function", "name": "weather"},
}


def _body(mode: str, seed: int, tokens: int) -> dict:
    meta = {"rollgate_ignore_eos": "true"} if mode == "free" else {}
    return {
        "model": "rollgate-tiny",
        "input": f"Request {seed}: what is the weather in Rome, and {seed} + 1?",
        "tools": [CALC, WEATHER],
        "tool_choice": MODES[mode],
        "max_output_tokens": tokens,
        "seed": seed,
        "metadata": meta,
    }


async def run(service, mode: str, concurrency: int, requests: int, tokens: int, offset: int) -> dict:
    async def one(i: int) -> tuple[int, bool]:
        resp = await service.create(_body(mode, i, tokens))
        return resp["usage"]["output_tokens"], any(item["type"] == "function_call" for item in resp["output"])

    done, elapsed = await closed_loop(one, concurrency=concurrency, requests=requests, offset=offset)
    produced = sum(n for n, _ in done)
    calls = sum(called for _, called in done)
    return {"tokens": produced, "seconds": elapsed, "ms_per_token": 1000 * elapsed / produced, "calls": calls}


async def main_async(args) -> dict:
    import torch

    from rollgate.model_server.local import LocalBackend
    from rollgate.model_server.service import ModelService

    torch.set_num_threads(args.threads)
    model_dir = cli.model_dir(args.model)
    backend = LocalBackend.from_pretrained(model_dir, device=args.device)
    service = ModelService(backend)
    try:
        await run(service, "free", 4, 4, args.tokens, offset=10**6)  # warm-up (allocator, kernels)
        started = time.perf_counter()
        await service.create(_body("required", 10**7, args.tokens))
        first_forced_s = time.perf_counter() - started
        rows = []
        for concurrency in (1, 8):
            for mode in MODES:
                runs = [
                    await run(service, mode, concurrency, args.requests, args.tokens, offset=r * args.requests)
                    for r in range(args.repeats)
                ]
                ms = spread([r["ms_per_token"] for r in runs])
                rows.append(
                    {
                        "concurrency": concurrency,
                        "mode": mode,
                        "requests": args.requests,
                        "tokens_per_run": runs[0]["tokens"],
                        "calls_per_run": runs[0]["calls"],
                        "ms_per_token": round(ms["median"], 2),
                        "ms_per_token_min": round(ms["min"], 2),
                        "ms_per_token_max": round(ms["max"], 2),
                    }
                )
            free = next(r for r in rows if r["concurrency"] == concurrency and r["mode"] == "free")
            for row in rows:
                if row["concurrency"] == concurrency:
                    row["ratio_vs_free"] = round(row["ms_per_token"] / free["ms_per_token"], 2)
        return {
            "model": "tiny",
            "max_output_tokens": args.tokens,
            "repeats": args.repeats,
            "torch_threads": args.threads,
            "device": backend.engine.device.type,
            "first_forced_s": round(first_forced_s, 3),
            "results": rows,
        }
    finally:
        await backend.aclose()


def main() -> int:
    p = cli.parser(__doc__, whole_doc=True)
    cli.add_model_flags(p)
    p.add_argument(
        "--tokens", type=cli.at_least(16), default=64, help="max output tokens per request (free: exactly this)"
    )
    p.add_argument("--requests", type=cli.COUNT, default=16, help="requests per run")
    p.add_argument("--repeats", type=cli.COUNT, default=3, help="runs per mode; the median is reported")
    args = p.parse_args()
    report = asyncio.run(main_async(args))
    print_table(
        report["results"],
        ["concurrency", "mode", "requests", "tokens_per_run", "calls_per_run", "ms_per_token", "ratio_vs_free"],
        title=f"tool_choice on the local backend, tiny model; first forced request {report['first_forced_s']} s",
    )
    path = write_results("bench_tool_choice", report)
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
