"""Prefix KV reuse in the local engine changes no result: multi-turn episodes and GRPO groups
produce the same token ids as with reuse off, and log-probs equal to float rounding. The cached
prefix's keys and values come from a forward over a shorter sequence, and the new tokens attend to
them through kernels of other shapes, so sums run in another order: in float32 the log-probs differ
by ~1e-6 (measured), far inside the 1e-4 the tests allow; token ids are equal. Also: eviction under
a tiny budget, invalidation on a weight update, streaming and structured rows, concurrent
requests sharing a prefix. The real tiny model throughout."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from rollgate.model_server import kv_cache
from rollgate.model_server.backend import SamplingParams
from rollgate.model_server.kv_cache import PrefixKVCache
from rollgate.model_server.local import LocalBackend
from rollgate.model_server.structured import responses_format
from tests.devices import TEST_DEVICE

LOGPROB_TOL = 1e-4
SYSTEM = "<|im_start|>system\nYou are an agent. Call a tool when it helps, then answer briefly.<|im_end|>\n"


def _backend(path: str, reuse: bool, **kw) -> LocalBackend:
    return LocalBackend.from_pretrained(path, device=TEST_DEVICE, weight_version="w0", kv_reuse=reuse, **kw)


@pytest.fixture(scope="module")
def pair(tiny_model_dir):
    """(with reuse, without reuse) over the same weights. A 20 ms batch window: concurrent
    submissions land in one prefill even when a busy machine pauses the event loop briefly."""
    on = _backend(tiny_model_dir, True, batch_window_ms=20.0)
    off = _backend(tiny_model_dir, False, batch_window_ms=20.0)
    yield on, off
    on.engine.close()
    off.engine.close()


def _prompt(tok, task: str) -> list[int]:
    return tok.encode(f"{SYSTEM}<|im_start|>user\n{task}<|im_end|>\n<|im_start|>assistant\n")


def _extend(tok, prompt: list[int], gen: list[int], turn: int) -> list[int]:
    """The agent's next prompt: the previous call's exact ids, the end-of-turn token, a tool output."""
    tail = f"\n<|im_start|>user\n<tool_response>step {turn}: 17 rows, total 4{turn}2</tool_response><|im_end|>\n"
    return (
        prompt
        + gen
        + ([] if gen[-1] == tok.eos_token_id else [tok.eos_token_id])
        + tok.encode(tail + "<|im_start|>assistant\n")
    )


async def _episode(backend, task: str, *, turns: int, seed: int | None, max_tokens: int = 10):
    prompt, out = _prompt(backend.tokenizer, task), []
    for t in range(turns):
        temp = 0.0 if seed is None else 0.9
        gen = await backend.generate(
            prompt,
            SamplingParams(max_tokens=max_tokens, temperature=temp, seed=None if seed is None else seed + t),
            None,
        )
        out.append(gen)
        prompt = _extend(backend.tokenizer, prompt, gen.token_ids, t)
    return out


def _same(got, want) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.prompt_ids == w.prompt_ids
        assert g.token_ids == w.token_ids
        assert g.log_probs == pytest.approx(w.log_probs, abs=LOGPROB_TOL)


@pytest.mark.parametrize("seed", [None, 7], ids=["greedy", "seeded"])
async def test_multi_turn_episodes_match_reuse_off_and_prefill_only_new_tokens(pair, seed):
    on, off = pair
    tasks = [f"Add the numbers in report {i}." for i in range(3)]
    reused, computed = on.engine.stats["reused_tokens"], on.engine.stats["prefill_tokens"]
    seeded = on.engine.kv.stats["shared_prefix_tokens"]
    got = await asyncio.gather(*(_episode(on, t, turns=4, seed=seed) for t in tasks))
    want = await asyncio.gather(*(_episode(off, t, turns=4, seed=seed) for t in tasks))
    for g, w in zip(got, want, strict=True):
        _same(g, w)
    prompt_tokens = sum(len(gen.prompt_ids) for ep in got for gen in ep)
    new_reused = on.engine.stats["reused_tokens"] - reused
    # every prompt token was computed for it or reused, besides a prefix the batch shares, computed once
    shared = on.engine.kv.stats["shared_prefix_tokens"] - seeded
    assert new_reused + on.engine.stats["prefill_tokens"] - computed - shared == prompt_tokens
    # turns 2-4 start from the KV of the previous call's prompt and generation (all but its last token)
    kept = sum(len(prev.prompt_ids) + len(prev.token_ids) - 1 for ep in got for prev in ep[:-1])
    assert new_reused >= kept


@pytest.mark.parametrize("seed", [None, 11], ids=["greedy", "seeded"])
async def test_group_of_eight_samples_is_prefilled_once_and_matches_reuse_off(pair, seed):
    on, off = pair
    prompt = _prompt(on.tokenizer, f"Group task {seed}: name three primes.")

    async def group(backend):
        temp = 0.0 if seed is None else 1.0
        params = [
            SamplingParams(max_tokens=8, temperature=temp, seed=None if seed is None else seed + i) for i in range(8)
        ]
        return await asyncio.gather(*(backend.generate(prompt, p, None) for p in params))

    stats = on.engine.stats
    shared, computed, reused = stats["shared_rows"], stats["prefill_tokens"], stats["reused_tokens"]
    got, want = await group(on), await group(off)
    _same(got, want)
    assert stats["shared_rows"] - shared == 7  # one prefill, expanded to eight rows
    assert stats["prefill_tokens"] - computed + stats["reused_tokens"] - reused == len(prompt)
    # a later sample of the same group starts from the kept KV: one token left to compute
    computed = on.engine.stats["prefill_tokens"]
    late = await on.generate(prompt, SamplingParams(max_tokens=8, temperature=0.0), None)
    assert on.engine.stats["prefill_tokens"] - computed == 1
    _same([late], [await off.generate(prompt, SamplingParams(max_tokens=8, temperature=0.0), None)])


async def test_n_choices_of_one_request_share_one_prefill(pair):
    from rollgate.model_server.service import ModelService

    on, off = pair
    body = {"model": "rollgate-tiny", "input": "List two colours.", "max_output_tokens": 8, "seed": 9}
    shared = on.engine.stats["shared_rows"]
    got = await (svc := ModelService(on)).complete(svc.prepare(body, n=8))
    want = await (ref := ModelService(off)).complete(ref.prepare(body, n=8))
    assert on.engine.stats["shared_rows"] - shared == 7
    _same([c.gen for c in got], [c.gen for c in want])
    assert len({tuple(c.gen.token_ids) for c in got}) > 1  # seed + index: the samples differ


async def test_concurrent_requests_sharing_a_prefix_reuse_it(pair):
    on, off = pair
    await on.generate(_prompt(on.tokenizer, "Warm up."), SamplingParams(max_tokens=2, temperature=0.0), None)
    hits = on.engine.kv.stats["hits"]
    prompts = [_prompt(on.tokenizer, f"Question {i}: what is {i} times {i + 2}?") for i in range(6)]
    params = [SamplingParams(max_tokens=8, temperature=0.8, seed=i) for i in range(6)]
    got = await asyncio.gather(*(on.generate(p, s, None) for p, s in zip(prompts, params, strict=True)))
    want = await asyncio.gather(*(off.generate(p, s, None) for p, s in zip(prompts, params, strict=True)))
    _same(got, want)
    assert on.engine.kv.stats["hits"] - hits == 6  # each found the shared system prompt's KV


async def test_a_batch_arriving_together_prefills_its_shared_system_prompt_once(tiny_model_dir):
    on, off = _backend(tiny_model_dir, True, batch_window_ms=200.0), _backend(tiny_model_dir, False)
    try:
        prompts = [_prompt(on.tokenizer, f"Task {i}: count to {i + 3}.") for i in range(6)]
        params = [SamplingParams(max_tokens=6, temperature=0.8, seed=i) for i in range(6)]
        got = await asyncio.gather(*(on.generate(p, s, None) for p, s in zip(prompts, params, strict=True)))
        want = await asyncio.gather(*(off.generate(p, s, None) for p, s in zip(prompts, params, strict=True)))
        _same(got, want)
        system = len(on.tokenizer.encode(SYSTEM))
        assert on.engine.kv.stats["shared_prefixes"] == 1  # the cache was empty: no row found a prefix
        assert on.engine.kv.stats["shared_prefix_tokens"] >= system
        # each row computed only what follows the shared prefix
        tails = sum(len(p) for p in prompts) - 6 * on.engine.kv.stats["shared_prefix_tokens"]
        assert on.engine.stats["prefill_tokens"] == tails + on.engine.kv.stats["shared_prefix_tokens"]
        assert on.engine.stats["prefill_tokens"] < off.engine.stats["prefill_tokens"] / 2
    finally:
        on.engine.close()
        off.engine.close()


def test_shared_prefixes_groups_prompts_by_their_common_start():
    a, b = [1, 2, 3, 4, 5, 6], [7, 7, 7, 7]
    prompts = [a + [9], b + [1], a + [8, 8], [5], b + [2, 3], a + [10]]
    got = sorted(kv_cache.shared_prefixes(prompts, 4))
    assert got == [a, b]
    assert kv_cache.shared_prefixes(prompts, 7) == []  # no group shares 7 tokens
    assert kv_cache.shared_prefixes([a, a + [1]], 2) == [a[:5]]  # the shorter prompt keeps its last token
    assert kv_cache.shared_prefixes([], 2) == []


async def test_streamed_and_structured_rows_work_on_reused_kv(pair):
    on, off = pair
    fmt = responses_format(
        {
            "format": {
                "type": "json_schema",
                "name": "v",
                "schema": {
                    "type": "object",
                    "properties": {"answer": {"enum": ["yes", "no"]}},
                    "required": ["answer"],
                    "additionalProperties": False,
                },
            }
        }
    )
    first = (await _episode(on, "Is 7 prime?", turns=1, seed=3))[0]
    ref_first = (await _episode(off, "Is 7 prime?", turns=1, seed=3))[0]
    _same([first], [ref_first])
    nxt = _extend(on.tokenizer, first.prompt_ids, first.token_ids, 0)
    reused = on.engine.stats["reused_tokens"]
    deltas, final = [], None
    async for item in on.generate_stream(nxt, SamplingParams(max_tokens=12, temperature=0.9, seed=5), None):
        if isinstance(item, str):
            deltas.append(item)
        else:
            final = item
    assert final is not None and "".join(deltas) == final.text
    assert on.engine.stats["reused_tokens"] - reused >= len(first.prompt_ids)
    _same([final], [await off.generate(nxt, SamplingParams(max_tokens=12, temperature=0.9, seed=5), None)])
    reused = on.engine.stats["reused_tokens"]
    structured = SamplingParams(max_tokens=40, temperature=1.0, seed=2, json_format=fmt)
    got = await on.generate(nxt, structured, None)
    assert on.engine.stats["reused_tokens"] - reused == len(nxt) - 1
    assert json.loads(got.text)["answer"] in ("yes", "no")
    _same([got], [await off.generate(nxt, structured, None)])


async def test_eviction_under_a_tiny_budget_keeps_results_exact(tiny_model_dir):
    on = _backend(tiny_model_dir, True, kv_cache_mb=0.15)  # about one 250-token sequence
    off = _backend(tiny_model_dir, False)
    try:
        tasks = [f"Summarise log file {i}." for i in range(3)]
        got = await asyncio.gather(*(_episode(on, t, turns=3, seed=21) for t in tasks))
        want = await asyncio.gather(*(_episode(off, t, turns=3, seed=21) for t in tasks))
        for g, w in zip(got, want, strict=True):
            _same(g, w)
        kv = on.engine.kv
        assert kv.stats["evicted"] > 0 and kv.stats["hits"] > 0
        assert 0 < kv.nbytes <= kv.budget
    finally:
        on.engine.close()
        off.engine.close()


async def test_weight_update_invalidates_and_the_next_call_recomputes(tiny_model_dir):
    on, off = _backend(tiny_model_dir, True), _backend(tiny_model_dir, False)
    try:
        first = (await _episode(on, "Count the files.", turns=1, seed=None))[0]
        nxt = _extend(on.tokenizer, first.prompt_ids, first.token_ids, 0)
        gen_ = torch.Generator().manual_seed(0)
        new = {
            n: p + 0.05 * torch.randn(p.shape, generator=gen_).to(p.device) for n, p in on.model.state_dict().items()
        }
        invalidated = on.engine.kv.stats["invalidated"]
        for backend in (on, off):
            await asyncio.to_thread(backend.load_weights, new, "w1")
        assert on.engine.kv.stats["invalidated"] > invalidated and len(on.engine.kv) == 0
        reused = on.engine.stats["reused_tokens"]
        greedy = SamplingParams(max_tokens=10, temperature=0.0)
        after = await on.generate(nxt, greedy, None)
        assert on.engine.stats["reused_tokens"] == reused  # nothing from the old weights was reused
        assert after.weight_version == "w1"
        _same([after], [await off.generate(nxt, greedy, None)])
        # reuse resumes on KV of the new weights
        again = _extend(on.tokenizer, nxt, after.token_ids, 1)
        assert (await on.generate(again, greedy, None)).token_ids == (await off.generate(again, greedy, None)).token_ids
        assert on.engine.stats["reused_tokens"] - reused == len(nxt) + len(after.token_ids) - 1
        # shared weights changed in place without `updating_weights` (a careless trainer): noticed too
        hits = on.engine.kv.stats["hits"]
        for backend in (on, off):
            with torch.no_grad():
                next(backend.model.parameters()).mul_(1.1)
        alone = await on.generate(again, greedy, None)
        assert on.engine.kv.stats["hits"] == hits
        _same([alone], [await off.generate(again, greedy, None)])
    finally:
        on.engine.close()
        off.engine.close()


def test_reuse_is_a_model_setting(tiny_model_dir):
    from rollgate.core.settings import Settings
    from rollgate.model_server.server import build_backend

    for reuse, mb in ((False, 64.0), (True, 2.0)):
        backend = build_backend(Settings(model={"model_path": tiny_model_dir, "kv_reuse": reuse, "kv_cache_mb": mb}))
        try:
            assert (backend.engine.kv is not None) == reuse
            if reuse:
                assert backend.engine.kv.budget == 2 * 2**20
        finally:
            backend.engine.close()


# ---- the cache alone (small tensors) ----------------------------------------------------------------
def _kv(n: int, fill: float = 0.0):
    return [(torch.full((1, n, 2), fill + i), torch.full((1, n, 2), -fill - i)) for i in range(2)]


def test_cache_returns_the_longest_prefix_and_leaves_the_last_token_to_compute():
    cache = PrefixKVCache(1 << 20, block=4, min_tokens=4)
    short, long_ = list(range(10)), list(range(20))
    cache.put(short, _kv(10, 1.0), epoch=0)
    cache.put(long_, _kv(20, 2.0), epoch=0)
    hit = cache.lookup(list(range(25)))
    assert hit is not None and hit.length == 20 and hit.whole and float(hit.kv[0][0][0, 0, 0]) == 2.0
    hit = cache.lookup(list(range(12)) + [99, 98])  # diverges inside a block: the exact common prefix
    assert hit is not None and hit.length == 12 and not hit.whole
    hit = cache.lookup(list(range(20)))  # the same ids again: the last one is computed for its logits
    assert hit is not None and hit.length == 19 and not hit.whole
    assert cache.lookup([5, 6, 7, 8, 9, 10]) is None


def test_cache_evicts_least_recently_used_refuses_stale_epochs_and_replaces_extended_entries():
    per = 8 * 2 * 2 * 4 * 2 + 8 * 8  # 8 tokens: 2 layers x (k, v) x [1, 8, 2] float32, plus ids
    cache = PrefixKVCache(2 * per, block=4, min_tokens=4)
    a, b, c = ([k] * 8 for k in (1, 2, 3))
    ka = cache.put(a, _kv(8), epoch=0)
    cache.put(b, _kv(8), epoch=0)
    assert cache.lookup(a + [0]) is not None  # touch a: b is now the oldest
    cache.put(c, _kv(8), epoch=0)
    assert cache.lookup(b + [0]) is None and cache.lookup(a + [0]) is not None and cache.nbytes <= cache.budget
    cache.invalidate()
    assert len(cache) == 0 and cache.put(a, _kv(8), epoch=0) is None  # computed before the update
    ka = cache.put(a, _kv(8), epoch=cache.epoch)
    cache.put(a + [4] * 4, _kv(12), epoch=cache.epoch, replaces=ka)
    assert len(cache) == 1 and cache.lookup(a + [4] * 4 + [0]).length == 12


def test_a_hash_collision_never_returns_another_sequences_kv(monkeypatch):
    monkeypatch.setattr(kv_cache, "block_hashes", lambda ids, block: [0] * (len(ids) // block))
    cache = PrefixKVCache(1 << 20, block=4, min_tokens=4)
    cache.put(list(range(8)), _kv(8), epoch=0)
    assert cache.lookup(list(range(100, 110))) is None
    assert cache.lookup(list(range(9))).length == 8
