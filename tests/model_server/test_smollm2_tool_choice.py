"""tool_choice on a real pretrained model: SmolLM2-135M-Instruct (no tool support in its template:
the tools are rendered into its prompt) over the three APIs, with the official SDKs, sampled at
temperature 1 over two seeds. `required` and a named function hold by constrained decoding (the
arguments valid for the tool's schema); `none` never returns a call, whatever the model writes."""

from __future__ import annotations

import json

import anthropic
import jsonschema
import openai
import pytest

from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings
from rollgate.model_server.app import create_model_app
from rollgate.model_server.server import build_service
from tests.devices import TEST_DEVICE

MODEL = "smollm2"
SEEDS = (0, 1)
WEATHER = {
    "name": "weather",
    "description": "The forecast for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
}
CLOCK = {
    "name": "clock",
    "description": "The time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}}},
}
TOOLS = [WEATHER, CLOCK]
SCHEMAS = {t["name"]: t["parameters"] for t in TOOLS}
QUESTION = "What will the weather be in Paris for the next 3 days?"
CHOICES = {  # per API: required, named, none
    "responses": ("required", {"type": "function", "name": "clock"}, "none"),
    "chat": ("required", {"type": "function", "function": {"name": "clock"}}, "none"),
    "messages": ({"type": "any"}, {"type": "tool", "name": "clock"}, {"type": "none"}),
}


@pytest.fixture(scope="module")
def url(smollm2_path):
    settings = Settings(
        model={"model_path": smollm2_path, "served_name": MODEL, "device": TEST_DEVICE, "reasoning_format": "none"}
    )
    service = build_service(settings)
    with serve_in_thread(create_model_app(service)) as base:
        yield base
    service.backend.engine.close()


def _calls(url: str, api: str, choice, seed: int) -> list[tuple[str, dict]]:
    """(name, arguments) of the calls one request returned, through the official SDK of `api`."""
    if api == "responses":
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)
        resp = client.responses.create(
            model=MODEL,
            input=QUESTION,
            tools=[{"type": "function", **t} for t in TOOLS],
            tool_choice=choice,
            max_output_tokens=96,
            temperature=1.0,
            extra_body={"seed": seed},
        )
        return [(i.name, json.loads(i.arguments)) for i in resp.output if i.type == "function_call"]
    if api == "chat":
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)
        resp = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": QUESTION}],
            tools=[{"type": "function", "function": t} for t in TOOLS],
            tool_choice=choice,
            max_tokens=96,
            temperature=1.0,
            seed=seed,
        )
        return [(c.function.name, json.loads(c.function.arguments)) for c in resp.choices[0].message.tool_calls or []]
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=300)
    reply = client.messages.create(
        model=MODEL,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in TOOLS],
        tool_choice=choice,
        max_tokens=96,
        extra_body={"seed": seed, "temperature": 1.0},  # this SDK takes temperature only there
    )
    return [(b.name, b.input) for b in reply.content if b.type == "tool_use"]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("api", sorted(CHOICES))
def test_required_named_and_none_hold_on_smollm2(url, api, seed):
    required, named, none = CHOICES[api]
    calls = _calls(url, api, required, seed)
    assert calls and all(n in SCHEMAS for n, _ in calls), calls
    for name, args in calls:
        jsonschema.validate(args, SCHEMAS[name])
    calls = _calls(url, api, named, seed)
    assert [n for n, _ in calls] == ["clock"], calls
    jsonschema.validate(calls[0][1], CLOCK["parameters"])
    assert _calls(url, api, none, seed) == []
