"""Token capture for clients that echo no token ids: a capture session in the URL records every
call, and a call that continues a recorded one starts with its exact ids (no re-tokenization).
Real servers on loopback with the tiny model; the official openai and anthropic SDKs."""

from __future__ import annotations

from itertools import pairwise

import anthropic
import httpx
import openai
import pytest
from fastapi import FastAPI

from rollgate.core.replicas import ReplicaSet
from rollgate.core.serving import serve_in_thread
from rollgate.gateway.model_routes import model_router
from rollgate.gateway.proxy import Forwarder, proxy_router
from rollgate.model_server.capture import CaptureStore
from rollgate.model_server.output import Generation
from tests.model_server.test_chat_completions import CHAT_TOOL

MODEL = "rollgate-tiny"


def _chat_episode(base_url: str, turns: int, seed: int) -> None:
    """What a Chat Completions harness does: echo the assistant message, add tool results."""
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60)
    messages = [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "What is 12 + 30?"}]
    for turn in range(turns):
        resp = client.chat.completions.create(
            model=MODEL, messages=messages, tools=[CHAT_TOOL], max_tokens=40, temperature=1.0, seed=seed + turn
        )
        msg = resp.choices[0].message
        messages.append(msg.model_dump(exclude_none=True))
        for call in msg.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": f"result {turn}"})
        if not msg.tool_calls:
            messages.append({"role": "user", "content": f"Go on, step {turn}."})


def _assert_token_exact(calls: list[dict], eos: int) -> None:
    for prev, cur in pairwise(calls):
        gen = prev["choices"][0]["generation_token_ids"]
        prefix = prev["prompt_token_ids"] + gen
        if gen[-1] != eos:  # cut at max tokens: the end-of-turn token is added once
            prefix.append(eos)
        assert cur["extends"] == prev["index"]
        assert cur["prompt_token_ids"][: len(prefix)] == prefix
        assert len(cur["prompt_token_ids"]) > len(prefix)
    for call in calls:
        [choice] = call["choices"]
        assert len(choice["generation_token_ids"]) == len(choice["generation_log_probs"]) > 0
        assert all(lp <= 0.0 for lp in choice["generation_log_probs"]) and choice["weight_version"] == "w0"


def test_chat_completions_three_turns_extend_the_exact_previous_ids(url, local_stack):
    eos = local_stack[1].tokenizer.eos_token_id
    _chat_episode(url + "/capture/ep-chat/v1", turns=3, seed=7)
    captured = httpx.get(url + "/v1/captures/ep-chat", timeout=10).json()
    calls = captured["calls"]
    assert [c["index"] for c in calls] == [0, 1, 2] and calls[0]["extends"] is None
    assert {c["api"] for c in calls} == {"chat.completions"} and captured["dropped_calls"] == 0
    _assert_token_exact(calls, eos)
    # DELETE hands the session over once and forgets it
    assert httpx.delete(url + "/v1/captures/ep-chat", timeout=10).json()["calls"] == calls
    gone = httpx.get(url + "/v1/captures/ep-chat", timeout=10)
    assert gone.status_code == 404 and gone.json()["error"]["field"] == "session"


def test_rewritten_history_starts_a_new_segment(url):
    client = openai.OpenAI(base_url=url + "/capture/ep-rewrite/v1", api_key="unused", max_retries=0, timeout=60)
    first = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=8, seed=1
    )
    # a harness that turns the answer into something else (smolagents' "Observation:" style)
    rewritten = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Thought: " + (first.choices[0].message.content or "")},
        {"role": "user", "content": "Observation: 3"},
    ]
    client.chat.completions.create(model=MODEL, messages=rewritten, max_tokens=8, seed=2)
    calls = httpx.get(url + "/v1/captures/ep-rewrite", timeout=10).json()["calls"]
    assert [c["extends"] for c in calls] == [None, None]


def test_messages_turns_extend_the_previous_ids_with_the_session_header(url, local_stack):
    eos = local_stack[1].tokenizer.eos_token_id
    client = anthropic.Anthropic(
        base_url=url, api_key="unused", max_retries=0, timeout=60, default_headers={"x-rollgate-session": "ep-msg"}
    )
    messages = [{"role": "user", "content": "What is 2 + 2?"}]
    for turn in range(3):
        msg = client.messages.create(model=MODEL, max_tokens=24, messages=messages, extra_body={"seed": turn})
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]})
        messages.append({"role": "user", "content": f"And step {turn}?"})
    calls = httpx.get(url + "/v1/captures/ep-msg", timeout=10).json()["calls"]
    assert len(calls) == 3 and {c["api"] for c in calls} == {"messages"}
    _assert_token_exact(calls, eos)


def test_gateway_proxy_and_embedded_routes_serve_every_dialect_with_capture(url, local_stack):
    service = local_stack[0]
    proxy = FastAPI()
    proxy.include_router(proxy_router(Forwarder(), model=ReplicaSet([url], what="model"), envs={}))
    embedded = FastAPI()
    embedded.include_router(model_router(service))
    for name, app in (("proxy", proxy), ("embedded", embedded)):
        with serve_in_thread(app) as front:
            session = f"ep-{name}"
            _chat_episode(front + f"/capture/{session}/v1", turns=2, seed=3)
            msg = anthropic.Anthropic(base_url=front + f"/capture/{session}", api_key="k", max_retries=0)
            with msg.messages.stream(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "Hi"}]) as s:
                assert s.get_final_message().role == "assistant"
            resp = openai.OpenAI(base_url=front + "/v1", api_key="k", max_retries=0).responses.create(
                model=MODEL, input="Hi", max_output_tokens=8
            )
            got = httpx.get(front + f"/v1/responses/{resp.id}", timeout=10)
            assert got.status_code == 200 and got.json()["id"] == resp.id
            calls = httpx.get(front + f"/v1/captures/{session}", timeout=10).json()["calls"]
            assert [c["api"] for c in calls] == ["chat.completions", "chat.completions", "messages"]
            assert calls[1]["extends"] == 0


def test_bad_session_names_are_refused(url):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    resp = httpx.post(url + "/v1/chat/completions", json=body, headers={"x-rollgate-session": "a b"}, timeout=10)
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "x-rollgate-session"
    resp = httpx.post(url + "/capture/" + "x" * 200 + "/v1/chat/completions", json=body, timeout=10)
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "session"


def _record(store: CaptureStore, session: str, n_tokens: int) -> int | None:
    gen = Generation(text="ok", finish_reason="stop", prompt_ids=[1] * n_tokens, token_ids=[2], log_probs=[-0.5])
    return store.record(
        session,
        api="chat.completions",
        model=MODEL,
        messages=[{"role": "user", "content": "x"}],
        tools=[],
        prompt_ids=[1] * n_tokens,
        choices=[([], gen)],
        extends=None,
    )


def test_capture_store_stays_within_its_bounds():
    store = CaptureStore(max_sessions=2, max_calls=2, max_tokens=100, ttl_s=3600)
    for s in ("a", "b", "c"):
        _record(store, s, 10)
    assert len(store) == 2 and store.evicted == 1  # least recently used session "a" went
    with pytest.raises(Exception, match="no capture session 'a'"):
        store.get("a")
    assert _record(store, "b", 10) == 1 and _record(store, "b", 10) is None  # the session is full
    assert store.get("b")["dropped_calls"] == 1
    _record(store, "c", 80)  # over the token budget: the oldest session goes
    assert store.tokens <= 100 and len(store) == 1
    expired = CaptureStore(ttl_s=0.0)
    _record(expired, "x", 1)
    with pytest.raises(Exception, match="expired"):
        expired.get("x")


def test_a_popped_session_keeps_no_late_call_and_records_each_choice_message():
    """A harness killed mid-call leaves a call in flight: when it lands after the owner took the
    record, it is served but not recorded, so no session is left behind."""
    store = CaptureStore(max_sessions=4, ttl_s=3600)
    _record(store, "ep", 3)
    [choice] = store.get("ep")["calls"][0]["choices"]
    assert choice["message"] == {"role": "assistant", "content": "", "tool_calls": []}
    assert len(store.pop("ep")["calls"]) == 1
    assert _record(store, "ep", 3) is None and store.late_calls == 1 and len(store) == 0
    with pytest.raises(Exception, match="no capture session 'quiet'"):
        store.pop("quiet")  # popping a session with no call yet still closes it
    assert _record(store, "quiet", 1) is None and len(store) == 0
