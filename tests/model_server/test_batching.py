"""The local engine decodes concurrent requests together, and batching does not change results."""

from __future__ import annotations

import asyncio

import pytest

from rollgate.core.errors import CapacityError
from tests.devices import TEST_DEVICE


def _req(prompt: str, **kw) -> dict:
    return {
        "model": "rollgate-tiny",
        "input": prompt,
        "max_output_tokens": 12,
        "temperature": 0,
        "metadata": {"rollgate_training": "true"},
        **kw,
    }


def _gen(resp: dict) -> list[int]:
    return resp["output"][0]["generation_token_ids"]


async def test_concurrent_requests_decode_together_and_match_solo_runs(local_stack):
    service, backend, metrics = local_stack
    prompts = [f"What is {i} + {i * 3}? Answer briefly." + " please" * i for i in range(8)]
    solo = [await service.create(_req(p)) for p in prompts]
    before = dict(backend.engine.stats)
    together = await asyncio.gather(*(service.create(_req(p)) for p in prompts))
    assert backend.engine.stats["max_batch"] >= 4
    assert backend.engine.stats["steps"] - before["steps"] < sum(len(_gen(r)) for r in together)
    # greedy decoding in a left-padded batch gives exactly the tokens of a solo run
    assert [_gen(r) for r in together] == [_gen(r) for r in solo]
    sample = metrics.registry.get_sample_value("rollgate_model_batch_size_bucket", {"le": "4.0"})
    total = metrics.registry.get_sample_value("rollgate_model_batch_size_count")
    assert total is not None and sample is not None and total > sample  # some steps had > 4 rows


async def test_request_arriving_mid_decode_joins_the_running_batch(local_stack):
    service, backend, _ = local_stack
    long = asyncio.create_task(
        service.create(_req("Tell me a long story.", max_output_tokens=60, temperature=1.0, seed=3))
    )
    await asyncio.sleep(0.05)
    joined_before = backend.engine.stats["joined_running"]
    late = await service.create(_req("Hi"))
    first = await long
    alone = await service.create(_req("Hi"))
    assert _gen(late) == _gen(alone)
    assert len(_gen(first)) > 0
    if len(_gen(first)) == 60:  # the long one was still running when the late one arrived
        assert backend.engine.stats["joined_running"] > joined_before


async def test_rows_of_mixed_lengths_joining_and_leaving_decode_as_they_do_alone(local_stack):
    service, backend, _ = local_stack
    # long and short prompts, outputs from 3 to 150 tokens (past the batch cache's decode room,
    # batch_kv.RIGHT_ROOM), arriving at different times: rows join wider and narrower batches and
    # leave from its middle
    plan = [(f"Story {i}: " + "once upon a time " * (i * 7 % 23), 3 + (i * 37) % 148) for i in range(12)]
    solo = [await service.create(_req(p, max_output_tokens=n)) for p, n in plan]

    async def later(i: int, p: str, n: int) -> dict:
        await asyncio.sleep(0.02 * (i % 4))
        return await service.create(_req(p, max_output_tokens=n))

    together = await asyncio.gather(*(later(i, p, n) for i, (p, n) in enumerate(plan)))
    assert backend.engine.stats["max_batch"] >= 4
    assert [_gen(r) for r in together] == [_gen(r) for r in solo]


async def test_same_seed_same_sample_and_log_probs_match_a_trainer_recompute(local_stack):
    import torch

    service, backend, _ = local_stack
    a = await service.create(_req("Pick a word.", temperature=0.8, seed=5, max_output_tokens=10))
    b = await service.create(_req("Pick a word.", temperature=0.8, seed=5, max_output_tokens=10))
    assert _gen(a) == _gen(b)
    item = a["output"][0]
    prompt, gen = item["prompt_token_ids"], item["generation_token_ids"]
    with torch.no_grad():  # what a trainer computes: log_softmax(logits / T) of each sampled token
        ids = torch.tensor([prompt + gen], device=backend.engine.device)
        logits = backend.model(input_ids=ids).logits[0].float()
    logp = torch.log_softmax(logits[len(prompt) - 1 : -1] / 0.8, -1)
    expected = [float(logp[i, t]) for i, t in enumerate(gen)]
    assert item["generation_log_probs"] == pytest.approx(expected, abs=1e-4)


async def test_full_queue_answers_capacity_error(tiny_model_dir):
    from rollgate.model_server.local import LocalBackend
    from rollgate.model_server.service import ModelService

    backend = LocalBackend.from_pretrained(tiny_model_dir, device=TEST_DEVICE, max_queue=2)
    service = ModelService(backend)
    try:
        results = await asyncio.gather(
            *(service.create(_req("Hi", max_output_tokens=20, temperature=1.0, seed=i)) for i in range(12)),
            return_exceptions=True,
        )
        refused = [r for r in results if isinstance(r, CapacityError)]
        served = [r for r in results if isinstance(r, dict)]
        assert len(refused) + len(served) == 12
        assert refused and all(r.status == 503 and r.retry_after_s > 0 for r in refused)
        assert 2 <= len(served) < 12
    finally:
        await backend.aclose()


async def test_ignore_eos_generates_exactly_max_output_tokens(local_stack):
    service, backend, _ = local_stack
    plain = await service.create(_req("Tell me a story.", temperature=1.0, seed=1, max_output_tokens=40))
    forced = await service.create(
        _req(
            "Tell me a story.",
            temperature=1.0,
            seed=1,
            max_output_tokens=40,
            metadata={"rollgate_training": "true", "rollgate_ignore_eos": "true"},
        )
    )
    ended = _gen(plain)
    assert plain["status"] == "completed" and len(ended) < 40 and ended[-1] == backend.tokenizer.eos_token_id
    assert forced["status"] == "incomplete" and forced["usage"]["output_tokens"] == 40
    assert _gen(forced)[: len(ended)] == ended  # same seed: the same sample, carried on past the end of turn
