"""Prefix KV reuse in the local backend: model time per episode with and without it, on the tiny
model, in one run (the two backends share one model and alternate: on/off, then off/on).

    python -m benchmarks.bench_kv_reuse [--rounds R] [--turns 8] [--group 8] [--episodes 4]
        [--system-tokens 320] [--tool-tokens 128] [--gen-tokens 24] [--threads 1]

Scenarios (an agent's calls go straight to the backend, as token ids):
- `8-turn episodes`: --episodes distinct tasks at once; each call's prompt is the previous call's
  prompt and generation plus the end-of-turn token, a tool output of --tool-tokens tokens and the
  next assistant header (what token-in/token-out builds);
- `group of 8`: --group samples of one prompt (a GRPO group), one call each;
- `group x 8 turns`: --group samples of one task, each an 8-turn episode (the GRPO agent workload).
Every call generates exactly --gen-tokens tokens (ignore_eos), so both sides do the same decode
work. Model time per episode = the sum of its calls' latencies. The cache is emptied before each
scenario run and tasks differ between rounds, so only reuse within a run counts. The run also
checks that both sides produce the same token ids and reports the largest log-prob difference.
`cpu_ratio`: the same ratio for the engine thread's CPU time per episode (read from /proc: less
sensitive to other load than wall time). `prefill_s` / `decode_s`: the engine's time in prefills
(cache lookups and copies included) and in decode forwards over a whole scenario run (all its
episodes): what reuse saves, and what it cannot.
Prints a table (medians over rounds) and writes benchmarks/results/bench_kv_reuse.json."""

from __future__ import annotations

import asyncio
import statistics
import time

from benchmarks import cli
from benchmarks.common import cpu_seconds, print_table, write_results
from benchmarks.measure import alternating, counters_since, median_of

SCENARIOS = ("8-turn episodes", "group of 8", "group x 8 turns")


class Workload:
    def __init__(self, tokenizer, args):
        self.tok, self.args = tokenizer, args
        eos = tokenizer.eos_token_id
        schema = (
            '{"name": "query_table", "parameters": {"type": "object", "properties": {"sql": {"type": "string"}}}}\n'
        )
        system = self._fit(f"<|im_start|>system\n# Tools\n<tools>\n{schema * 40}", args.system_tokens)
        self.system = system + tokenizer.encode("</tools><|im_end|>\n")
        rows = "".join(f"row {i}: region {i % 7}, units {i * 13 % 97}, status ok\n" for i in range(200))
        self.tool_open = [eos] + tokenizer.encode("\n<|im_start|>user\n<tool_response>")
        self.tool_body = self._fit(rows, args.tool_tokens)
        self.tool_close = tokenizer.encode("</tool_response><|im_end|>\n<|im_start|>assistant\n")

    def _fit(self, text: str, n: int) -> list[int]:
        ids = self.tok.encode(text)
        if len(ids) < n:
            raise SystemExit(f"cannot build {n} tokens of filler; lower the size")
        return ids[:n]

    def first_prompt(self, task: str) -> list[int]:
        return self.system + self.tok.encode(f"<|im_start|>user\n{task}<|im_end|>\n<|im_start|>assistant\n")

    def next_prompt(self, prompt: list[int], gen: list[int]) -> list[int]:
        # ignore_eos: the generation may not end with the end-of-turn token; chat.py then adds it
        closing = self.tool_open if gen[-1] != self.tok.eos_token_id else self.tool_open[1:]
        return prompt + gen + closing + self.tool_body + self.tool_close

    def last_prompt_tokens(self, turns: int) -> int:
        probe = self.first_prompt("Task 00-00: look up the weekly totals per region.")
        per_turn = self.args.gen_tokens + len(self.tool_open) + len(self.tool_body) + len(self.tool_close)
        return len(probe) + (turns - 1) * per_turn


async def episode(backend, work: Workload, task: str, turns: int, seed: int) -> tuple[float, list]:
    from rollgate.model_server.backend import SamplingParams

    prompt, spent, gens = work.first_prompt(task), 0.0, []
    for t in range(turns):
        params = SamplingParams(max_tokens=work.args.gen_tokens, temperature=1.0, seed=seed * 100 + t, ignore_eos=True)
        started = time.perf_counter()
        gen = await backend.generate(prompt, params, None)
        spent += time.perf_counter() - started
        gens.append(gen)
        prompt = work.next_prompt(prompt, gen.token_ids)
    return spent, gens


async def run_scenario(backend, work: Workload, name: str, rnd: int) -> dict:
    a = work.args
    with backend.updating_weights(backend.weight_version):
        pass  # empties the prefix cache: reuse across runs would flatter the "on" side
    if name == "8-turn episodes":
        jobs = [
            (f"Task {rnd:02d}-{e:02d}: look up the weekly totals per region.", a.turns, e) for e in range(a.episodes)
        ]
    else:
        turns = 1 if name == "group of 8" else a.turns
        jobs = [(f"Task {rnd:02d}-99: look up the weekly totals per region.", turns, s) for s in range(a.group)]
    before = dict(backend.engine.stats)
    engine_thread = backend.engine._thread.native_id  # its CPU time: steadier than wall time on a busy box
    cpu0, started = cpu_seconds(engine_thread), time.perf_counter()
    done = await asyncio.gather(*(episode(backend, work, task, turns, seed) for task, turns, seed in jobs))
    wall, cpu = time.perf_counter() - started, cpu_seconds(engine_thread) - cpu0
    return {
        "per_episode_s": [spent for spent, _ in done],
        "wall_s": wall,
        "engine_cpu_s_per_episode": cpu / len(jobs),
        **counters_since(before, backend.engine.stats, ("prefill_tokens", "reused_tokens", "prefill_s", "decode_s")),
        "gens": [g for _, gens in done for g in gens],
    }


async def main_async(args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollgate.model_server.backend import SamplingParams
    from rollgate.model_server.local import LocalBackend

    torch.set_num_threads(args.threads)
    model_dir = cli.model_dir(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).to(args.device if args.device != "auto" else "cpu")
    work = Workload(tokenizer, args)
    longest = work.last_prompt_tokens(args.turns) + args.gen_tokens
    if longest > model.config.max_position_embeddings:
        raise SystemExit(
            f"the last turn needs {longest} tokens; the model holds {model.config.max_position_embeddings}"
        )
    sides = {
        "on": LocalBackend.from_model(model, tokenizer, kv_reuse=True, kv_cache_mb=args.kv_cache_mb),
        "off": LocalBackend.from_model(model, tokenizer, kv_reuse=False),
    }
    try:
        for backend in sides.values():  # warm-up (allocator, kernels)
            await backend.generate(work.first_prompt("warm up"), SamplingParams(max_tokens=4, seed=0), None)
        runs: dict[str, dict[str, list[dict]]] = {s: {"on": [], "off": []} for s in SCENARIOS}
        for rnd in range(args.rounds):
            for name in SCENARIOS:
                for side in alternating(("on", "off"), rnd):
                    runs[name][side].append(await run_scenario(sides[side], work, name, rnd))
        rows = [summarise(name, runs[name], args) for name in SCENARIOS]
        return {
            "model": "tiny",
            "device": sides["on"].engine.device.type,
            "torch_threads": args.threads,
            "rounds": args.rounds,
            "workload": {
                "turns": args.turns,
                "group": args.group,
                "episodes": args.episodes,
                "system_tokens": len(work.system),
                "tool_output_tokens": args.tool_tokens,
                "gen_tokens": args.gen_tokens,
                "last_prompt_tokens": work.last_prompt_tokens(args.turns),
            },
            "kv_cache_stats": dict(sides["on"].engine.kv.stats),
            "results": rows,
        }
    finally:
        for backend in sides.values():
            await backend.aclose()


def summarise(name: str, runs: dict[str, list[dict]], args) -> dict:
    med = {side: statistics.median(t for r in runs[side] for t in r["per_episode_s"]) for side in runs}
    per_round = [
        statistics.median(off["per_episode_s"]) / statistics.median(on["per_episode_s"])
        for on, off in zip(runs["on"], runs["off"], strict=True)
    ]
    same_ids, worst = True, 0.0
    for on, off in zip(runs["on"], runs["off"], strict=True):
        for g_on, g_off in zip(on["gens"], off["gens"], strict=True):
            same_ids &= g_on.token_ids == g_off.token_ids
            if g_on.token_ids == g_off.token_ids:
                worst = max(worst, max(abs(x - y) for x, y in zip(g_on.log_probs, g_off.log_probs, strict=True)))
    off, on = runs["off"], runs["on"]
    return {
        "scenario": name,
        "episodes": len(on[0]["per_episode_s"]),
        "model_s_per_episode_off": round(med["off"], 3),
        "model_s_per_episode_on": round(med["on"], 3),
        "ratio": round(med["off"] / med["on"], 2),
        "ratio_per_round": [round(x, 2) for x in per_round],
        "engine_cpu_s_per_episode_off": median_of(off, "engine_cpu_s_per_episode", 3),
        "engine_cpu_s_per_episode_on": median_of(on, "engine_cpu_s_per_episode", 3),
        "cpu_ratio": round(median_of(off, "engine_cpu_s_per_episode") / median_of(on, "engine_cpu_s_per_episode"), 2),
        "wall_s_off": median_of(off, "wall_s", 3),
        "wall_s_on": median_of(on, "wall_s", 3),
        "prefill_s_off": median_of(off, "prefill_s", 3),
        "prefill_s_on": median_of(on, "prefill_s", 3),
        "decode_s_off": median_of(off, "decode_s", 3),
        "decode_s_on": median_of(on, "decode_s", 3),
        "prefill_tokens_off": off[0]["prefill_tokens"],
        "prefill_tokens_on": on[0]["prefill_tokens"],
        "same_token_ids": same_ids,
        "max_abs_logprob_diff": float(f"{worst:.2e}"),
    }


def main() -> int:
    p = cli.parser(__doc__, whole_doc=True)
    cli.add_model_flags(p, device="cpu")
    p.add_argument("--rounds", type=cli.COUNT, default=5, help="alternating runs of every scenario; medians reported")
    p.add_argument("--turns", type=cli.COUNT, default=8)
    p.add_argument("--group", type=cli.COUNT, default=8, help="samples per group")
    p.add_argument("--episodes", type=cli.COUNT, default=4, help="concurrent episodes of the multi-turn scenario")
    p.add_argument("--system-tokens", type=int, default=320, help="system prompt with tool schemas")
    p.add_argument("--tool-tokens", type=int, default=128, help="tokens of each tool output")
    p.add_argument("--gen-tokens", type=cli.COUNT, default=24, help="tokens generated per call (exact: ignore_eos)")
    p.add_argument("--kv-cache-mb", type=cli.positive(), default=1024.0)
    args = p.parse_args()
    report = asyncio.run(main_async(args))
    print_table(
        report["results"],
        [
            "scenario",
            "episodes",
            "model_s_per_episode_off",
            "model_s_per_episode_on",
            "ratio",
            "cpu_ratio",
            "prefill_s_off",
            "prefill_s_on",
            "decode_s_off",
            "decode_s_on",
            "prefill_tokens_off",
            "prefill_tokens_on",
            "same_token_ids",
            "max_abs_logprob_diff",
        ],
        title=f"prefix KV reuse, tiny model, median of {args.rounds} alternating rounds",
    )
    path = write_results("bench_kv_reuse", report)
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
