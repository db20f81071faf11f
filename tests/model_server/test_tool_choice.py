"""tool_choice on the three APIs, with the official SDKs against a real server on loopback and the
tiny model. The tiny model is random: only constrained decoding makes "required" and a named
function hold, over every seed. The scripted backend (no constrained decoding) stands in where a
test needs the model to write a given call for sure."""

from __future__ import annotations

import json

import anthropic
import jsonschema
import openai
import pytest

from tests.model_server.conftest import CALC_TOOL, GUIDE_BACKENDS, serve_local

MODEL = "rollgate-tiny"
SEEDS = (0, 1, 2)
WEATHER_TOOL = {
    "type": "function",
    "name": "weather",
    "description": "The forecast for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
}
TOOLS = [CALC_TOOL, WEATHER_TOOL]
SCHEMAS = {t["name"]: t["parameters"] for t in TOOLS}
CHAT_TOOLS = [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in TOOLS]
MESSAGES_TOOLS = [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in TOOLS]
# a keyword each guide cannot enforce: the native one compiles no pattern, llguidance no `not`
UNENFORCEABLE = {"native": ("pattern", "a+"), "llguidance": ("not", {"const": "a"})}


@pytest.fixture(scope="module", params=GUIDE_BACKENDS)
def local_stack(request, tiny_model_dir):
    """The local stack once per structured-output guide (conftest.GUIDE_BACKENDS)."""
    yield from serve_local(tiny_model_dir, request.param)


def _openai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)


def _anthropic(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=120)


def _valid(name: str, arguments: dict) -> bool:
    jsonschema.validate(arguments, SCHEMAS[name])  # raises on invalid arguments
    return True


# --- Responses ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_responses_required_always_calls_a_declared_tool(url, seed):
    resp = _openai(url).responses.create(
        model=MODEL, input="Hi", tools=TOOLS, tool_choice="required", max_output_tokens=96, extra_body={"seed": seed}
    )
    calls = [i for i in resp.output if i.type == "function_call"]
    assert calls and all(c.name in SCHEMAS and _valid(c.name, json.loads(c.arguments)) for c in calls)
    assert resp.tool_choice == "required"


@pytest.mark.parametrize("seed", SEEDS)
def test_responses_named_function_calls_exactly_that_function(url, seed):
    resp = _openai(url).responses.create(
        model=MODEL,
        input="Hi",
        tools=TOOLS,
        tool_choice={"type": "function", "name": "weather"},
        max_output_tokens=96,
        extra_body={"seed": seed},
    )
    calls = [i for i in resp.output if i.type == "function_call"]
    assert [c.name for c in calls] == ["weather"]
    assert _valid("weather", json.loads(calls[0].arguments))


@pytest.mark.parametrize("seed", SEEDS)
def test_responses_none_never_returns_a_call(scripted_url, seed):
    # the script writes a well-formed call to a declared tool: with "none" it stays text
    script = json.dumps([{"call": {"name": "calculator", "arguments": {"expression": "1+1"}}}])
    resp = _openai(scripted_url).responses.create(
        model=MODEL,
        input="Hi",
        tools=TOOLS,
        tool_choice="none",
        metadata={"rollgate_script": script},
        extra_body={"seed": seed},
    )
    assert [i.type for i in resp.output] == ["message"]
    assert "calculator" in resp.output_text


def test_responses_stream_with_a_forced_call_ends_with_the_call(url):
    with _openai(url).responses.stream(
        model=MODEL,
        input="Hi",
        tools=TOOLS,
        tool_choice={"type": "function", "name": "calculator"},
        max_output_tokens=96,
        extra_body={"seed": 5},
    ) as stream:
        final = stream.get_final_response()
    assert [i.name for i in final.output if i.type == "function_call"] == ["calculator"]


def test_a_call_to_an_undeclared_tool_stays_text(scripted_url):
    script = json.dumps([{"call": {"name": "rm_rf", "arguments": {}}}])
    resp = _openai(scripted_url).responses.create(
        model=MODEL, input="Hi", tools=TOOLS, metadata={"rollgate_script": script}
    )
    assert [i.type for i in resp.output] == ["message"]
    assert "rm_rf" in resp.output_text


def test_previous_response_id_is_echoed(url):
    client = _openai(url)
    first = client.responses.create(model=MODEL, input="Hi", max_output_tokens=8, extra_body={"seed": 1})
    assert first.previous_response_id is None
    second = client.responses.create(
        model=MODEL, input="More", previous_response_id=first.id, max_output_tokens=8, extra_body={"seed": 1}
    )
    assert second.previous_response_id == first.id
    assert client.responses.retrieve(second.id).previous_response_id == first.id


# --- Chat Completions ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_chat_required_and_named_hold(url, seed):
    client = _openai(url)
    args = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "tools": CHAT_TOOLS, "seed": seed}
    required = client.chat.completions.create(**args, tool_choice="required", max_tokens=96)
    calls = required.choices[0].message.tool_calls
    assert calls and all(_valid(c.function.name, json.loads(c.function.arguments)) for c in calls)
    assert required.choices[0].finish_reason == "tool_calls"
    named = client.chat.completions.create(
        **args, tool_choice={"type": "function", "function": {"name": "weather"}}, max_tokens=96
    )
    calls = named.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["weather"]
    assert _valid("weather", json.loads(calls[0].function.arguments))


def test_chat_none_never_returns_a_call(scripted_url):
    script = json.dumps([{"call": {"name": "weather", "arguments": {"city": "Rome", "days": 1}}}])
    reply = _openai(scripted_url).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Hi"}],
        tools=CHAT_TOOLS,
        tool_choice="none",
        metadata={"rollgate_script": script},
    )
    assert not reply.choices[0].message.tool_calls and "weather" in reply.choices[0].message.content


# --- Anthropic Messages -------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_messages_any_and_named_tool_hold(url, seed):
    client = _anthropic(url)
    args = {"model": MODEL, "max_tokens": 96, "messages": [{"role": "user", "content": "Hi"}], "tools": MESSAGES_TOOLS}
    anyone = client.messages.create(**args, tool_choice={"type": "any"}, extra_body={"seed": seed})
    uses = [b for b in anyone.content if b.type == "tool_use"]
    assert uses and all(_valid(b.name, b.input) for b in uses) and anyone.stop_reason == "tool_use"
    named = client.messages.create(**args, tool_choice={"type": "tool", "name": "weather"}, extra_body={"seed": seed})
    uses = [b for b in named.content if b.type == "tool_use"]
    assert [b.name for b in uses] == ["weather"] and _valid("weather", uses[0].input)


def test_messages_none_never_returns_a_tool_use(scripted_url):
    script = json.dumps([{"call": {"name": "calculator", "arguments": {"expression": "2"}}}])
    reply = _anthropic(scripted_url).messages.create(
        model=MODEL,
        max_tokens=32,
        messages=[{"role": "user", "content": "Hi"}],
        tools=MESSAGES_TOOLS,
        tool_choice={"type": "none"},
        metadata={"user_id": "u"},
        extra_body={"metadata": {"rollgate_script": script}},
    )
    assert [b.type for b in reply.content] == ["text"] and reply.stop_reason == "end_turn"


# --- bad input ----------------------------------------------------------------------------------


def _field_of(exc: Exception) -> str | None:
    body = exc.body  # type: ignore[attr-defined]  # the SDK hands over the error object
    return body.get("field") if isinstance(body, dict) else None


def test_naming_an_undeclared_function_is_a_400_on_every_api(url):
    client = _openai(url)
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="Hi", tools=TOOLS, tool_choice={"type": "function", "name": "nope"})
    assert _field_of(info.value) == "tool_choice" and "declared" in str(info.value)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Hi"}],
            tools=CHAT_TOOLS,
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )
    assert _field_of(info.value) == "tool_choice"
    with pytest.raises(anthropic.BadRequestError) as info:
        _anthropic(url).messages.create(
            model=MODEL,
            max_tokens=8,
            messages=[{"role": "user", "content": "Hi"}],
            tools=MESSAGES_TOOLS,
            tool_choice={"type": "tool", "name": "nope"},
        )
    assert "tool_choice" in str(info.value)


def test_required_without_tools_and_unknown_values_are_400s(url):
    client = _openai(url)
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="Hi", tool_choice="required")
    assert _field_of(info.value) == "tool_choice"
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="Hi", tools=TOOLS, extra_body={"tool_choice": "always"})
    assert _field_of(info.value) == "tool_choice" and "accepted" in str(info.value)


def test_a_backend_without_constrained_decoding_refuses_a_forced_choice(scripted_url):
    with pytest.raises(openai.BadRequestError) as info:
        _openai(scripted_url).responses.create(model=MODEL, input="Hi", tools=TOOLS, tool_choice="required")
    assert _field_of(info.value) == "tool_choice" and "cannot enforce" in str(info.value)


def test_a_tool_schema_that_cannot_be_enforced_names_its_keyword(url, local_stack):
    keyword, value = UNENFORCEABLE[local_stack[1].guide_backend]
    tool = {**CALC_TOOL, "parameters": {"type": "object", "properties": {"x": {"type": "string", keyword: value}}}}
    with pytest.raises(openai.BadRequestError) as info:
        _openai(url).responses.create(model=MODEL, input="Hi", tools=[tool], tool_choice="required")
    assert _field_of(info.value) == f"tools[0].parameters.properties.x.{keyword}"


def test_chat_stream_with_a_named_function_streams_that_call(url):
    stream = _openai(url).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Hi"}],
        tools=CHAT_TOOLS,
        tool_choice={"type": "function", "function": {"name": "weather"}},
        max_tokens=96,
        seed=4,
        stream=True,
    )
    names, args, finish = [], "", None
    for chunk in stream:
        for delta_call in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            if delta_call.function.name:
                names.append(delta_call.function.name)
            args += delta_call.function.arguments or ""
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    assert names == ["weather"] and _valid("weather", json.loads(args)) and finish == "tool_calls"


def test_a_forced_call_cut_by_max_output_tokens_is_incomplete_text(url):
    resp = _openai(url).responses.create(
        model=MODEL,
        input="Hi",
        tools=TOOLS,
        tool_choice={"type": "function", "name": "weather"},
        max_output_tokens=5,
        extra_body={"seed": 0},
    )
    assert resp.status == "incomplete" and [i.type for i in resp.output] == ["message"]
    assert resp.output_text.startswith("<tool_call>")
