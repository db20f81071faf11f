"""SSE streaming is token by token: text deltas arrive while the model is still generating, add
up to the final text, never carry tool-call or reasoning markup, and a client that goes away
frees its batch slot. Real HTTP on loopback, the real tiny model."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from rollgate.core.items import output_text
from rollgate.core.serving import serve_in_thread
from rollgate.model_server import sse
from rollgate.model_server.app import create_model_app
from rollgate.model_server.scripted import ScriptedBackend
from rollgate.model_server.service import ModelService
from rollgate.model_server.textstream import IncrementalDetokenizer, PlainTextGate
from tests.model_server.conftest import CALC_TOOL

# seed 1 answers plain text for this prompt; ignore_eos makes it run for max_output_tokens
LONG = {
    "model": "rollgate-tiny",
    "input": "Tell me a story.",
    "seed": 1,
    "stream": True,
    "metadata": {"rollgate_ignore_eos": "true"},
}


@pytest.fixture(scope="module")
def base_url(local_stack):
    service, _, metrics = local_stack
    with serve_in_thread(create_model_app(service, metrics)) as url:
        yield url


def _events(response: httpx.Response, on_event=None) -> list[tuple[float, dict]]:
    out = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            event = json.loads(line[len("data: ") :])
            out.append((time.perf_counter(), event))
            if on_event is not None and on_event(event) is False:
                break
    return out


def test_deltas_arrive_while_generating_and_add_up_to_the_final_text(base_url, local_stack):
    _, backend, _ = local_stack
    running_at_first_delta: list[int] = []

    def watch(event: dict) -> None:
        if event["type"] == "response.output_text.delta" and not running_at_first_delta:
            running_at_first_delta.append(backend.engine.pending())

    with httpx.stream("POST", base_url + "/v1/responses", json={**LONG, "max_output_tokens": 64}, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = _events(r, watch)
    deltas = [(t, e) for t, e in events if e["type"] == "response.output_text.delta"]
    end_t, final = events[-1]
    assert final["type"] == "response.incomplete"  # ignore_eos: cut at max_output_tokens
    assert final["response"]["usage"]["output_tokens"] == 64
    assert running_at_first_delta == [1]  # the request was still decoding when its first text arrived
    assert len(deltas) >= 5 and len({t for t, _ in deltas}) >= 2
    assert deltas[0][0] < end_t
    assert "".join(e["delta"] for _, e in deltas) == output_text(final["response"]["output"])
    assert [e["sequence_number"] for _, e in events] == list(range(len(events)))


def test_client_going_away_mid_stream_frees_its_batch_slot(base_url, local_stack):
    _, backend, metrics = local_stack
    cancelled = backend.engine.stats["cancelled"]
    labels = {"backend": "local", "status": "cancelled"}
    counted = metrics.registry.get_sample_value("rollgate_model_requests_total", labels) or 0.0
    body = {**LONG, "max_output_tokens": 1900}  # ~10 s of decoding if nobody stopped it
    with httpx.stream("POST", base_url + "/v1/responses", json=body, timeout=60) as r:
        seen = _events(r, lambda e: e["type"] != "response.output_text.delta")  # stop at the first delta
        assert seen[-1][1]["type"] == "response.output_text.delta"
        assert backend.engine.pending() == 1
    # leaving the block closed the connection mid-stream
    deadline = time.monotonic() + 5
    while backend.engine.pending() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert backend.engine.pending() == 0
    assert backend.engine.stats["cancelled"] == cancelled + 1
    assert metrics.registry.get_sample_value("rollgate_model_requests_total", labels) == counted + 1


def test_sdk_stream_true_final_response_equals_the_non_streaming_one_in_training_mode(base_url):
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=60)
    args = {
        "model": "rollgate-tiny",
        "input": "What is 2 + 3?",
        "max_output_tokens": 48,
        "temperature": 1.0,
        "tools": [CALC_TOOL],
        "extra_body": {"seed": 4},
        "extra_headers": {"x-rollgate-training": "1"},
    }
    plain = client.responses.create(**args)
    events = list(client.responses.create(**args, stream=True))
    final = events[-1].response
    assert events[-1].type in ("response.completed", "response.incomplete")
    streamed = [i.model_dump() for i in final.output]
    expected = [i.model_dump() for i in plain.output]
    for item in streamed + expected:
        item.pop("id"), item.pop("call_id", None)
    # the second call reuses the first's prompt KV (engine prefix cache): log-probs agree up to
    # float rounding, everything else exactly (same seed)
    lps = [item.pop("generation_log_probs", None) for item in streamed + expected]
    assert streamed == expected
    for got, want in zip(lps[: len(streamed)], lps[len(streamed) :], strict=True):
        assert (got is None) == (want is None) and (got is None or got == pytest.approx(want, abs=1e-4))
    assert streamed[0]["generation_token_ids"] and lps[0]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text


async def test_tool_call_markup_is_never_streamed_as_text(tiny_model_dir):
    service = ModelService(ScriptedBackend(AutoTokenizer.from_pretrained(tiny_model_dir), max_context=2048))
    script = json.dumps(
        [{"text": 'Let me check. <tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>'}]
    )
    body = {"model": "rollgate-tiny", "input": "2+3?", "tools": [CALC_TOOL], "metadata": {"rollgate_script": script}}
    events = [e async for e in sse.api_events(await service.stream(body))]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == "Let me check."
    final = events[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["message", "function_call"]
    args = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert json.loads(args[0]["arguments"]) == {"expression": "2+3"}
    announced = [e["item"]["id"] for e in events if e["type"] == "response.output_item.added"]
    assert announced == [i["id"] for i in final["output"]]


@pytest.mark.parametrize(
    ("pieces", "shown"),
    [
        (["  Hello ", "wor", "ld  "], "Hello world"),  # stripped like the final message
        (["Hi <to", "ol_call>{}</tool_call> more"], "Hi"),  # a tag split over deltas never leaks
        (["<think>plan</think>", "answer"], ""),  # reasoning first: the message is sent at the end
        (["a <", " b", " <x>"], "a < b <x>"),  # a '<' that starts no tag is released
        (["x <thi", "nk>y"], "x"),
    ],
)
def test_plain_text_gate_releases_only_what_the_message_starts_with(pieces, shown):
    gate = PlainTextGate()
    assert "".join(gate.feed(p) for p in pieces) == shown == gate.sent


def test_incremental_detokenizer_deltas_add_up_to_the_decoded_text(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = 'Grüße, 世界 🎉! <tool_call>{"x": 1}</tool_call> done'
    ids = tok.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tok)
    deltas = [detok.push(i) for i in ids]
    assert "".join(deltas) == tok.decode(ids, skip_special_tokens=False) == text
    assert not any("\ufffd" in d for d in deltas)


def test_decode_stream_and_the_window_fallback_give_the_same_deltas_on_any_ids(tiny_model_dir):
    """Random ids split characters anywhere (byte-level BPE): the DecodeStream path and the
    pure-Python window path release the same text, and it adds up to one decode of all ids."""
    import random

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    rng = random.Random(7)
    for _ in range(20):
        ids = [rng.randrange(len(tok)) for _ in range(rng.randint(1, 60))]
        fast = IncrementalDetokenizer(tok)
        slow = IncrementalDetokenizer(tok)
        slow._stream = None  # the fallback for tokenizers without a Rust backend
        fast_text = "".join(fast.push(i) for i in ids)
        slow_text = "".join(slow.push(i) for i in ids)
        whole = tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        assert fast_text == slow_text
        # all of it, but a partial character at the very end, which is held back until it completes
        assert whole.startswith(fast_text) and set(whole[len(fast_text) :]) <= {"\ufffd"}
