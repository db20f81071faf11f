"""Anthropic Messages with the official anthropic SDK against a real server on loopback: the tiny
model for real generation, the scripted backend where a test needs a tool call for sure."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from rollgate.core.serving import serve_in_thread
from rollgate.model_server.app import create_model_app

MODEL = "rollgate-tiny"
CALC = {
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "input_schema": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
}


@pytest.fixture(scope="module")
def tiny_url(local_stack):
    service, _, metrics = local_stack
    with serve_in_thread(create_model_app(service, metrics)) as url:
        yield url


def _client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=60)


def test_plain_create_answers_a_message(tiny_url):
    msg = _client(tiny_url).messages.create(
        model=MODEL,
        max_tokens=16,
        system="Be brief.",
        messages=[{"role": "user", "content": "What is 2 + 2?"}],
        extra_body={"temperature": 0.7},  # this SDK version sends sampling settings only this way
    )
    assert msg.type == "message" and msg.role == "assistant" and msg.model == MODEL
    assert msg.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert msg.content and {b.type for b in msg.content} <= {"text", "thinking", "tool_use"}
    assert msg.usage.input_tokens > 0 and 0 < msg.usage.output_tokens <= 16


def test_stream_yields_official_events_and_the_final_message(tiny_url):
    client = _client(tiny_url)
    args = {"model": MODEL, "max_tokens": 24, "messages": [{"role": "user", "content": "Say hello."}]}
    plain = client.messages.create(**args, extra_body={"seed": 4})
    with client.messages.stream(**args, extra_body={"seed": 4}) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in plain.content]
    assert final.stop_reason == plain.stop_reason and final.usage.output_tokens == plain.usage.output_tokens


def test_tool_use_round_trip_plain_and_streamed(scripted_url):
    client = _client(scripted_url)
    messages = [{"role": "user", "content": "What is 6 * 7?"}]
    first = client.messages.create(model=MODEL, max_tokens=64, messages=messages, tools=[CALC])
    assert first.stop_reason == "tool_use"
    [use] = [b for b in first.content if b.type == "tool_use"]
    assert use.name == "calculator" and use.input == {"expression": "a"}
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "42"}]},
    ]
    second = client.messages.create(model=MODEL, max_tokens=64, messages=messages, tools=[CALC])
    assert second.stop_reason == "end_turn" and second.content[0].text == "done"
    with client.messages.stream(model=MODEL, max_tokens=64, messages=messages[:1], tools=[CALC]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in final.content] == [("tool_use", "calculator", {"expression": "a"})]


def test_stop_sequences_report_the_sequence(scripted_url):
    msg = _client(scripted_url).messages.create(
        model=MODEL,
        max_tokens=64,
        messages=[{"role": "user", "content": "go"}],
        stop_sequences=["beta"],
        metadata={"user_id": "u1"},
        extra_body={"metadata": {"rollgate_script": '[{"text": "alpha beta gamma"}]'}},
    )
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == "beta"
    assert msg.content[0].text == "alpha"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"model": MODEL, "max_tokens": 8, "messages": []}, "messages"),
        ({"model": MODEL, "max_tokens": 8, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
        (
            {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image"}]}]},
            "messages[0].content[0].type",
        ),
        (
            {
                "model": MODEL,
                "max_tokens": 8,
                "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f"}]}],
            },
            "messages[0].content[0].input",
        ),
        ({"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "top_k": 5}, "top_k"),
        (
            {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f"}]},
            "tools[0].input_schema",
        ),
        (
            {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "temperature": 1.5},
            "temperature",
        ),
        (
            {
                "model": MODEL,
                "max_tokens": 8,
                "messages": [{"role": "user", "content": "x"}],
                "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
            },
            "output_config.format",
        ),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(scripted_url, body, field):
    for stream in (False, True):
        resp = httpx.post(scripted_url + "/v1/messages", json=dict(body, stream=stream), timeout=30)
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["field"] == field


def test_sdk_raises_bad_request(scripted_url):
    with pytest.raises(anthropic.BadRequestError, match="top_k"):
        _client(scripted_url).messages.create(
            model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "x"}], extra_body={"top_k": 3}
        )
