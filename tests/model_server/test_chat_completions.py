"""Chat Completions with the official openai SDK against a real server on loopback: the tiny model
(local backend) for real generation, the scripted backend where a test needs a tool call for sure."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from rollgate.core.serving import serve_in_thread
from rollgate.model_server.app import create_model_app

CHAT_TOOL = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}
MODEL = "rollgate-tiny"


@pytest.fixture(scope="module")
def tiny_url(local_stack):
    service, _, metrics = local_stack
    with serve_in_thread(create_model_app(service, metrics)) as url:
        yield url


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_plain_create_answers_a_chat_completion(tiny_url):
    resp = _client(tiny_url).chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}],
        max_tokens=16,
        temperature=0.7,
        seed=3,
    )
    assert resp.object == "chat.completion" and resp.model == MODEL and len(resp.choices) == 1
    choice = resp.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length", "tool_calls")
    assert 0 < resp.usage.completion_tokens <= 16 and resp.usage.prompt_tokens > 0
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_stream_chunks_add_up_to_the_plain_answer(tiny_url):
    client = _client(tiny_url)
    args = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 24,
        "temperature": 1.0,
        "seed": 5,
    }
    plain = client.chat.completions.create(**args)
    chunks = list(client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == (plain.choices[0].message.content or "")  # same seed, same tokens
    assert finish == [plain.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == plain.usage.completion_tokens


def test_n_gives_n_choices_with_distinct_seeds(tiny_url):
    resp = _client(tiny_url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Count."}], max_tokens=12, n=3, seed=1, temperature=1.0
    )
    assert [c.index for c in resp.choices] == [0, 1, 2]
    again = _client(tiny_url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Count."}], max_tokens=12, n=3, seed=1, temperature=1.0
    )
    # reproducible per index, and each index samples with its own seed
    assert [c.message.content for c in resp.choices] == [c.message.content for c in again.choices]
    assert len({c.message.content for c in resp.choices}) > 1
    stream = _client(tiny_url).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Count."}],
        max_tokens=12,
        n=3,
        seed=1,
        temperature=1.0,
        stream=True,
    )
    texts = ["", "", ""]
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
    assert texts == [c.message.content or "" for c in resp.choices]


def test_logprobs_are_the_sampled_tokens_log_probs(tiny_url, local_stack):
    tok = local_stack[1].tokenizer
    resp = _client(tiny_url).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=10,
        logprobs=True,
        seed=2,
        extra_headers={"x-rollgate-training": "1"},
    )
    choice = resp.choices[0]
    content = choice.logprobs.content
    ids, lps = choice.model_extra["generation_token_ids"], choice.model_extra["generation_log_probs"]
    assert content and all(t.logprob <= 0.0 and t.top_logprobs == [] for t in content)
    # one entry per generated token, minus the end-of-turn token that ends a finished answer
    shown = ids if choice.finish_reason == "length" else ids[:-1]
    assert [t.logprob for t in content] == lps[: len(shown)]
    assert [t.token for t in content] == [tok.decode([i]) for i in shown]
    assert len(ids) == resp.usage.completion_tokens


def test_tool_calls_round_trip(scripted_url):
    client = _client(scripted_url)
    messages = [{"role": "user", "content": "What is 6 * 7?"}]
    first = client.chat.completions.create(model=MODEL, messages=messages, tools=[CHAT_TOOL])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "calculator" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == {"expression": "a"}
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "42"},
    ]
    second = client.chat.completions.create(model=MODEL, messages=messages, tools=[CHAT_TOOL])
    assert second.choices[0].finish_reason == "stop" and second.choices[0].message.content == "done"
    # streamed, the tool call arrives as one complete tool_calls delta
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "again"}], tools=[CHAT_TOOL], stream=True
        )
    )
    deltas = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(d.index, d.function.name) for d in deltas] == [(0, "calculator")]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_stop_sequence_cuts_text_and_tokens(scripted_url, tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    script = json.dumps([{"text": "alpha beta STOP gamma"}])
    resp = httpx.post(
        scripted_url + "/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": [{"role": "user", "content": "go"}],
            "stop": ["STOP"],
            "metadata": {"rollgate_script": script},
        },
        headers={"x-rollgate-training": "1"},
        timeout=30,
    ).json()
    choice = resp["choices"][0]
    assert choice["message"]["content"] == "alpha beta" and choice["finish_reason"] == "stop"
    ids = choice["generation_token_ids"]
    assert tok.decode(ids).endswith("STOP") and len(ids) == len(choice["generation_log_probs"])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": MODEL, "messages": []}, "messages"),
        ({"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content[0].type",
        ),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "n": 0}, "n"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "temperature": 3}, "temperature"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}, "top_logprobs"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "presence_penalty": 1}, "presence_penalty"),
        (
            {
                "model": MODEL,
                "messages": [{"role": "user", "content": "x"}],
                "response_format": {"type": "json_object"},
            },
            "response_format",
        ),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
            "tools[0].function",
        ),
        (
            {
                "model": MODEL,
                "messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}}]}],
            },
            "messages[0].tool_calls[0].function.arguments",
        ),
        ({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}, "model"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(scripted_url, body, field):
    for stream in (False, True):
        resp = httpx.post(scripted_url + "/v1/chat/completions", json=dict(body, stream=stream), timeout=30)
        assert resp.status_code in (400, 404, 422), resp.text
        err = resp.json()["error"]
        assert err["field"] == field, err
        assert field.split("[")[0].split(".")[0] in err["message"] or resp.status_code == 404


def test_sdk_raises_bad_request_with_the_message(scripted_url):
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        _client(scripted_url).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], logprobs=True, top_logprobs=2
        )
