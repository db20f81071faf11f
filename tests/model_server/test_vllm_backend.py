"""The vllm backend's routing, failover and timeouts.

The upstreams here are small loopback HTTP servers standing in for vLLM's `/v1/completions`
(a fake, because a real vLLM server takes ~40 s to start: the real one runs in the slow tier,
test_vllm_real.py). They answer in vLLM's wire format and record which prompts they served."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from fastapi import FastAPI, Request

from rollgate.core.errors import UpstreamError, UpstreamTimeout
from rollgate.core.serving import serve_in_thread
from rollgate.model_server.service import ModelService
from rollgate.model_server.vllm import VllmBackend


def fake_vllm(name: str, seen: list, *, delay_s: float = 0.0, eos: int = 2) -> FastAPI:
    app = FastAPI()

    @app.get("/health")
    async def health():
        return {}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        seen.append((name, body))
        if delay_s:
            await asyncio.sleep(delay_s)
        assert isinstance(body["prompt"], list) and all(isinstance(t, int) for t in body["prompt"])
        ids = [body["prompt"][-1], eos]  # echo the last prompt token, then stop
        return {
            "id": "cmpl-1",
            "object": "text_completion",
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "text": "x",
                    "finish_reason": "stop",
                    "token_ids": ids,
                    "logprobs": {"tokens": [f"token_id:{t}" for t in ids], "token_logprobs": [-0.25, -0.5]},
                }
            ],
        }

    return app


@pytest.fixture
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _service(urls, tokenizer, timeout_s=5.0) -> ModelService:
    return ModelService(
        VllmBackend(urls, tokenizer, model="tiny", timeout_s=timeout_s, health_interval_s=0.5),
        served_name="rollgate-tiny",
    )


def _req(session: str, training: bool = True) -> dict:
    meta = {"rollgate_session": session}
    if training:
        meta["rollgate_training"] = "true"
    return {"model": "rollgate-tiny", "input": f"task {session}", "max_output_tokens": 8, "metadata": meta}


async def test_sessions_stick_to_one_replica_and_spread_over_replicas(tokenizer):
    seen: list = []
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(serve_in_thread(fake_vllm(f"r{i}", seen))) for i in range(3)]
        service = _service(urls, tokenizer)
        for s in range(12):
            for _ in range(2):
                resp = await service.create(_req(f"s{s}"))
                item = resp["output"][0]
                assert item["generation_token_ids"][-1] == tokenizer.eos_token_id
                assert item["generation_log_probs"] == [-0.25, -0.5]
                assert item["prompt_token_ids"] == seen[-1][1]["prompt"]  # the service's ids, sent as ints
        await service.aclose()
    by_session: dict[str, set[str]] = {}
    for name, body in seen:
        by_session.setdefault(tokenizer.decode(body["prompt"]), set()).add(name)
    assert all(len(replicas) == 1 for replicas in by_session.values())
    assert len(set().union(*by_session.values())) >= 2
    assert seen[0][1]["logprobs"] == 0 and seen[0][1]["return_token_ids"] is True


async def test_dead_replica_fails_over_to_a_live_one(tokenizer):
    seen: list = []
    with contextlib.ExitStack() as stack:
        live = stack.enter_context(serve_in_thread(fake_vllm("live", seen)))
        with serve_in_thread(fake_vllm("doomed", seen)) as doomed:
            service = _service([doomed, live], tokenizer)
            # find sessions that prefer the doomed replica
            order = service.backend.router.order
            sessions = [f"s{i}" for i in range(40) if order(f"s{i}")[0] == doomed][:3]
            assert sessions
        for s in sessions:  # the doomed one is gone now
            resp = await service.create(_req(s))
            assert resp["status"] == "completed"
        assert [name for name, _ in seen[-len(sessions) :]] == ["live"] * len(sessions)
        assert service.backend.router.live() == [live]
        await service.aclose()


async def test_all_replicas_down_is_a_typed_error_fast(tokenizer):
    with serve_in_thread(fake_vllm("gone", [])) as url:
        pass
    service = _service([url], tokenizer)
    started = time.monotonic()
    with pytest.raises(UpstreamError) as info:
        await service.create(_req("s"))
    assert time.monotonic() - started < 3
    assert info.value.component == "model" and info.value.status >= 500
    await service.aclose()


async def test_slow_replica_times_out_within_the_configured_timeout(tokenizer):
    with serve_in_thread(fake_vllm("slow", [], delay_s=10)) as url:
        service = _service([url], tokenizer, timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(UpstreamTimeout):
            await service.create(_req("s"))
        assert time.monotonic() - started < 2.0
        await service.aclose()


def fake_vllm_document(seen: list, doc_ids: list[int], eos: int) -> FastAPI:
    """A vLLM stand-in that answers every completion with a given JSON document, then eos."""
    app = FastAPI()

    @app.get("/health")
    async def health():
        return {}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        seen.append(body)
        ids = [*doc_ids, eos]
        lps = [-0.5] * len(ids)
        choice = {"index": 0, "text": "", "finish_reason": "stop", "token_ids": ids}
        choice["logprobs"] = {"tokens": [f"token_id:{t}" for t in ids], "token_logprobs": lps}
        return {"id": "cmpl-1", "object": "text_completion", "model": body["model"], "choices": [choice]}

    return app


async def test_a_forced_tool_call_is_decoded_as_prefix_document_suffix(tokenizer):
    """The vllm backend forces the format's text around a document vLLM's structured outputs
    sample: the same ids a single constrained decode gives, forced tokens at log-prob 0."""
    from tests.model_server.conftest import CALC_TOOL

    doc = tokenizer.encode('{"name": "calculator", "arguments": {"expression": "1"}}', add_special_tokens=False)
    seen: list = []
    eos = tokenizer.eos_token_id
    with serve_in_thread(fake_vllm_document(seen, doc, eos)) as url:
        service = _service([url], tokenizer)
        req = {**_req("s1"), "tools": [CALC_TOOL], "tool_choice": {"type": "function", "name": "calculator"}}
        resp = await service.create({**req, "max_output_tokens": 64})
        await service.aclose()
    [call] = [i for i in resp["output"] if i["type"] == "function_call"]
    assert call["name"] == "calculator" and call["arguments"] == '{"expression": "1"}'
    prefix = tokenizer.encode("<tool_call>\n", add_special_tokens=False)
    suffix = tokenizer.encode("\n</tool_call>", add_special_tokens=False)
    assert seen[0]["prompt"] == call["prompt_token_ids"] + prefix  # vLLM continues after the forced prefix
    schema = seen[0]["structured_outputs"]["json"]
    assert schema["properties"]["name"] == {"const": "calculator"}
    assert call["generation_token_ids"] == prefix + doc + suffix + [eos]
    assert call["generation_log_probs"] == [0.0] * len(prefix) + [-0.5] * len(doc) + [0.0] * (len(suffix) + 1)


async def test_idle_connections_are_dropped_before_vllm_s_keep_alive_closes_them(tokenizer):
    """vLLM's server closes a connection idle for 5 s; a pooled one reused as it does failed a GRPO
    step's first completion (ServerDisconnected). Clients drop them sooner (core.http.CLIENT_KEEPALIVE_S):
    back to back, requests reuse a connection; after KEEPALIVE_S idle, the next one opens another."""
    vllm_keep_alive_s = 5.0  # VLLM_HTTP_TIMEOUT_KEEP_ALIVE's default
    ports: list[int] = []
    app = fake_vllm("r0", [])

    @app.middleware("http")
    async def peer(request: Request, call_next):
        if request.url.path == "/v1/completions":
            ports.append(request.client.port)
        return await call_next(request)

    with serve_in_thread(app) as url:
        # health checks a minute apart: none keeps the connection busy in between
        backend = VllmBackend([url], tokenizer, model="tiny", timeout_s=5.0, health_interval_s=60.0)
        service = ModelService(backend, served_name="rollgate-tiny")
        try:
            for _ in range(3):
                await service.create(_req("s"))
            await asyncio.sleep(vllm_keep_alive_s - 1.0)  # vLLM would still keep it; the client must not
            await service.create(_req("s"))
        finally:
            await service.aclose()
    # pooled: back to back, a connection serves more than one (the first health check, running
    # beside them, may take one in between)
    assert len(set(ports[:3])) < 3, ports
    assert ports[3] not in ports[:3], ports  # idle past CLIENT_KEEPALIVE_S: dropped by the client


async def test_a_turn_carries_the_version_served_when_its_request_was_sent(tokenizer):
    """Asynchronous RL reloads weights while rollouts run: a turn whose request went out before
    the reload finished is labelled with the older policy (some of its tokens are that policy's),
    so a staleness bound never takes it for fresher than it is. A request sent after the reload
    carries the new version."""
    with serve_in_thread(fake_vllm("r0", [], delay_s=1.0)) as url:
        backend = VllmBackend([url], tokenizer, model="tiny", timeout_s=5.0, weight_version="step-0")
        service = ModelService(backend, served_name="rollgate-tiny")
        try:
            in_flight = asyncio.create_task(service.create(_req("s")))
            await asyncio.sleep(0.3)
            assert not in_flight.done()
            backend.weight_version = "step-1"  # a reload that completed while the request ran
            assert {i["weight_version"] for i in (await in_flight)["output"]} == {"step-0"}
            assert {i["weight_version"] for i in (await service.create(_req("s")))["output"]} == {"step-1"}
        finally:
            await service.aclose()
