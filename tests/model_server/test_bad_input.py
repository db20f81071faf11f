"""Bad requests get a 4xx naming the field and the reason, never a 500."""

from __future__ import annotations

import httpx
import pytest

from rollgate.core.serving import serve_in_thread
from rollgate.model_server.app import create_model_app
from rollgate.model_server.service import ModelService


@pytest.fixture(scope="module")
def base_url(local_stack):
    _, backend, _ = local_stack
    # a small context so "prompt too long" is cheap to reach
    service = ModelService(backend, served_name="rollgate-tiny", max_context_tokens=64)
    with serve_in_thread(create_model_app(service)) as url:
        yield url


OK = {"model": "rollgate-tiny", "input": "hi", "max_output_tokens": 4}

CASES = [
    ("unknown model", {**OK, "model": "gpt-nope"}, 404, "model"),
    ("missing input", {"model": "rollgate-tiny"}, 400, "input"),
    ("empty input list", {**OK, "input": []}, 400, "input"),
    ("unknown item type", {**OK, "input": [{"type": "image_call"}]}, 400, "input[0].type"),
    ("item not an object", {**OK, "input": ["hi"]}, 400, "input[0]"),
    ("message without content", {**OK, "input": [{"role": "user"}]}, 400, "input[0].content"),
    ("bad role", {**OK, "input": [{"role": "robot", "content": "x"}]}, 400, "input[0].role"),
    (
        "bad content part",
        {**OK, "input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
        400,
        "input[0].content[0].type",
    ),
    (
        "function call without name",
        {**OK, "input": [{"type": "function_call", "arguments": "{}"}]},
        400,
        "input[0].name",
    ),
    (
        "token ids not ints",
        {
            **OK,
            "input": [
                {
                    "type": "function_call",
                    "name": "f",
                    "arguments": "{}",
                    "prompt_token_ids": ["a"],
                    "generation_token_ids": [1],
                }
            ],
        },
        400,
        "input[0].prompt_token_ids",
    ),
    (
        "token id outside vocabulary",
        {
            **OK,
            "input": [
                {
                    "type": "function_call",
                    "name": "f",
                    "arguments": "{}",
                    "prompt_token_ids": [1],
                    "generation_token_ids": [10**9],
                },
                {"type": "function_call_output", "output": "x"},
            ],
        },
        400,
        "input.generation_token_ids",
    ),
    ("zero max_output_tokens", {**OK, "max_output_tokens": 0}, 400, "max_output_tokens"),
    ("negative max_output_tokens", {**OK, "max_output_tokens": -5}, 400, "max_output_tokens"),
    ("temperature out of range", {**OK, "temperature": 9}, 400, "temperature"),
    ("top_p zero", {**OK, "top_p": 0}, 400, "top_p"),
    ("tool without name", {**OK, "tools": [{"type": "function"}]}, 400, "tools[0].name"),
    ("prompt over the context", {**OK, "input": "word " * 200}, 400, "input"),
    ("bad seed in metadata", {**OK, "metadata": {"rollgate_seed": "x"}}, 400, "metadata.rollgate_seed"),
    (
        "bad ignore_eos in metadata",
        {**OK, "metadata": {"rollgate_ignore_eos": "maybe"}},
        400,
        "metadata.rollgate_ignore_eos",
    ),
    ("body not an object", [1, 2], 400, "body"),
]


@pytest.mark.parametrize(("case", "body", "status", "field"), CASES, ids=[c[0] for c in CASES])
def test_bad_request_names_the_field(base_url, case, body, status, field):
    r = httpx.post(base_url + "/v1/responses", json=body, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["field"] == field
    assert err["message"] and err["component"] == "model"


def test_malformed_json_is_a_400(base_url):
    r = httpx.post(base_url + "/v1/responses", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "body"


def test_streaming_errors_keep_their_status(base_url):
    r = httpx.post(base_url + "/v1/responses", json={**OK, "model": "nope", "stream": True})
    assert r.status_code == 404 and r.json()["error"]["field"] == "model"
    r = httpx.post(base_url + "/v1/responses", json={**OK, "input": "word " * 200, "stream": True})
    assert r.status_code == 400 and r.json()["error"]["field"] == "input"


def test_unparseable_tool_call_stays_a_message():
    from rollgate.model_server.output import parse_text

    items = parse_text('<tool_call>{"name": "calc", "arguments": {"x": }</tool_call>')
    assert [i["type"] for i in items] == ["message"]
    assert items[0]["content"][0]["text"].startswith("<tool_call>")
    good = parse_text('<think>plan</think>ok <tool_call>{"name": "calc", "arguments": {"x": 1}}</tool_call>')
    assert [i["type"] for i in good] == ["reasoning", "message", "function_call"]
    assert good[2]["arguments"] == '{"x": 1}' and good[1]["content"][0]["text"] == "ok"
