"""Structured output is enforced, never ignored: the tiny model (local backend, constrained
decoding) answers JSON that parses and validates against the requested schema through the
Responses API, Chat Completions and Anthropic Messages, with the official SDKs on a real loopback
server, streamed or not. What cannot be enforced is a 400 naming the field. The vllm backend hands
the schema to vLLM (its request is checked against a stand-in upstream: a real vLLM runs only in
the slow tier)."""

from __future__ import annotations

import asyncio
import contextlib
import json

import anthropic
import httpx
import jsonschema
import openai
import pytest
import torch
from fastapi import FastAPI, Request
from pydantic import BaseModel, Field
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollgate.core.serving import serve_in_thread
from rollgate.model_server.local import guide_index
from rollgate.model_server.passthrough import OpenAIPassthrough
from rollgate.model_server.service import ModelService
from rollgate.model_server.structured import responses_format
from rollgate.model_server.vllm import VllmBackend
from tests.model_server.conftest import CALC_TOOL, GUIDE_BACKENDS, serve_local
from tests.model_server.test_vllm_backend import fake_vllm

MODEL = "rollgate-tiny"
# Bounded (string lengths, array sizes) so that every document fits in MAX_TOKENS: one token is
# at least one byte, so a cut-off answer would be a bug, not bad luck.
MAX_TOKENS = 200
SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer"},
            "tags": {"type": "array", "items": {"enum": ["red", "blue"]}, "maxItems": 2},
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": False,
    },
    "verdict": {
        "type": "object",
        "properties": {"answer": {"enum": ["yes", "no"]}, "sure": {"type": ["boolean", "null"]}},
        "required": ["answer"],
        "additionalProperties": False,
    },
    "numbers": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
}
PATTERN = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]+$"}}, "required": ["code"]}
NOT = {"type": "object", "properties": {"code": {"type": "string", "not": {"const": "A"}}}, "required": ["code"]}
# a schema each guide cannot enforce, and the keyword its 400 names
UNENFORCEABLE = {"native": (PATTERN, "pattern"), "llguidance": (NOT, "not")}
# what llguidance enforces beyond the native subset (vLLM's guidance backend compiles the same)
WIDER = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]$"},
        "n": {"type": "integer", "minimum": 3, "exclusiveMaximum": 9, "multipleOf": 2},
        "pair": {"type": "array", "prefixItems": [{"type": "boolean"}, {"enum": ["x", "y"]}], "items": False},
        "choice": {"oneOf": [{"type": "null"}, {"type": "string", "maxLength": 4}]},
        "extra": {"type": "object", "patternProperties": {"^k[0-9]$": {"type": "boolean"}}, "maxProperties": 2},
    },
    "required": ["code", "n", "pair", "choice"],
    "additionalProperties": False,
}


class Owner(BaseModel):
    name: str = Field(max_length=8)


class Pet(BaseModel):  # nested models: the SDK's strict schema uses $defs and $ref
    kind: str = Field(max_length=8)
    owner: Owner
    legs: int


@pytest.fixture(scope="module", params=GUIDE_BACKENDS)
def local_stack(request, tiny_model_dir):
    """The local stack once per structured-output guide (conftest.GUIDE_BACKENDS)."""
    yield from serve_local(tiny_model_dir, request.param)


def _fmt(name: str, schema: dict | None = None) -> dict:
    return {"format": {"type": "json_schema", "name": name, "schema": schema or SCHEMAS[name], "strict": True}}


def _valid(text: str, schema: dict) -> None:
    jsonschema.validate(json.loads(text), schema)


async def test_responses_route_enforces_each_schema_for_several_seeds(url):
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)
    cases = [(name, seed) for name in SCHEMAS for seed in (1, 2)]
    calls = [
        client.responses.create(
            model=MODEL,
            input="Answer in JSON.",
            text=_fmt(name),
            max_output_tokens=MAX_TOKENS,
            extra_body={"seed": seed},
        )
        for name, seed in cases
    ]
    parsed = client.responses.parse(
        model=MODEL, input="A pet.", text_format=Pet, max_output_tokens=MAX_TOKENS, extra_body={"seed": 3}
    )
    *answers, pet = await asyncio.gather(*calls, parsed)
    for (name, _), resp in zip(cases, answers, strict=True):
        assert resp.status == "completed", resp.output_text
        _valid(resp.output_text, SCHEMAS[name])
        assert resp.text.format.type == "json_schema" and resp.text.format.name == name  # echoed as asked
    assert pet.status == "completed" and isinstance(pet.output_parsed, Pet)


async def test_chat_completions_response_format_n_choices_parse_and_json_object(url):
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)
    messages = [{"role": "user", "content": "Answer in JSON."}]
    schema_format = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMAS["person"]}}
    many, pet, free = await asyncio.gather(
        client.chat.completions.create(
            model=MODEL, messages=messages, response_format=schema_format, n=3, seed=5, max_tokens=MAX_TOKENS
        ),
        client.chat.completions.parse(
            model=MODEL, messages=messages, response_format=Pet, seed=6, max_tokens=MAX_TOKENS
        ),
        client.chat.completions.create(
            model=MODEL, messages=messages, response_format={"type": "json_object"}, seed=7, max_tokens=32
        ),
    )
    assert len(many.choices) == 3
    for choice in many.choices:
        assert choice.finish_reason == "stop" and not choice.message.tool_calls
        _valid(choice.message.content, SCHEMAS["person"])
    assert isinstance(pet.choices[0].message.parsed, Pet)
    if free.choices[0].finish_reason == "stop":  # json_object is unbounded: it may be cut at max_tokens
        assert isinstance(json.loads(free.choices[0].message.content), dict)
    else:
        assert free.choices[0].message.content.lstrip().startswith("{")


async def test_streaming_keeps_the_constraint(url):
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)

    async def responses_stream() -> tuple[str, str]:
        deltas, final = [], None
        stream = await client.responses.create(
            model=MODEL, input="JSON please.", text=_fmt("verdict"), max_output_tokens=MAX_TOKENS, stream=True
        )
        async for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            elif event.type == "response.completed":
                final = event.response
        assert final is not None
        return "".join(deltas), final.output_text

    async def chat_stream() -> str:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "JSON please."}],
            response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMAS["numbers"]}},
            max_tokens=MAX_TOKENS,
            seed=4,
            stream=True,
        )
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    (streamed, final), chat = await asyncio.gather(responses_stream(), chat_stream())
    assert streamed == final
    _valid(final, SCHEMAS["verdict"])
    _valid(chat, SCHEMAS["numbers"])


def test_messages_output_config_format_is_enforced(url):
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=300)
    msg = client.messages.create(
        model=MODEL,
        max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": "JSON please."}],
        output_config={"format": {"type": "json_schema", "schema": SCHEMAS["verdict"]}},
        extra_body={"seed": 8},
    )
    assert msg.stop_reason == "end_turn" and [b.type for b in msg.content] == ["text"]
    _valid(msg.content[0].text, SCHEMAS["verdict"])


def test_log_probs_are_those_of_the_constrained_distribution(url, local_stack, tiny_model_dir):
    backend = local_stack[1]
    body = {
        "model": MODEL,
        "input": "A person, in JSON.",
        "text": _fmt("person"),
        "max_output_tokens": MAX_TOKENS,
        "temperature": 0.7,
        "seed": 11,
        "metadata": {"rollgate_training": "true"},
    }
    item = httpx.post(url + "/v1/responses", json=body, timeout=300).json()["output"][0]
    prompt, ids, reported = item["prompt_token_ids"], item["generation_token_ids"], item["generation_log_probs"]
    assert ids[-1] == backend.tokenizer.eos_token_id and reported[-1] == 0.0  # after the '}' only the end is allowed
    # Recompute with a fresh copy of the model: log_softmax over the allowed tokens of logits / T.
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
    index = guide_index(backend.guide_backend, backend.tokenizer, backend.engine.eos_ids)
    guide = index.guide(responses_format(body["text"]))
    constrained, plain = [], []
    for step, tok in enumerate(ids):
        constrained.append(float(torch.log_softmax(guide.constrain(logits[step]) / 0.7, -1)[tok]))
        plain.append(float(torch.log_softmax(logits[step] / 0.7, -1)[tok]))
        guide.advance(tok)
    assert reported == pytest.approx(constrained, abs=2e-3)
    assert sum(reported) > sum(plain) + 1.0  # the unconstrained distribution is not what was reported


def test_previous_response_id_continues_with_a_format(url):
    meta = {"rollgate_training": "true"}
    first = httpx.post(
        url + "/v1/responses",
        json={"model": MODEL, "input": "Hi", "max_output_tokens": 8, "seed": 1, "metadata": meta},
        timeout=300,
    ).json()
    second = httpx.post(
        url + "/v1/responses",
        json={
            "model": MODEL,
            "input": "Now the verdict, in JSON.",
            "previous_response_id": first["id"],
            "text": _fmt("verdict"),
            "max_output_tokens": MAX_TOKENS,
            "metadata": meta,
        },
        timeout=300,
    ).json()
    _valid(second["output"][0]["content"][0]["text"], SCHEMAS["verdict"])
    a, b = first["output"][0], second["output"][0]
    assert b["prompt_token_ids"][: len(a["prompt_token_ids"]) + len(a["generation_token_ids"])] == (
        a["prompt_token_ids"] + a["generation_token_ids"]
    )
    unknown = httpx.post(
        url + "/v1/responses",
        json={"model": MODEL, "input": "x", "previous_response_id": "resp_nope", "text": _fmt("verdict")},
        timeout=30,
    )
    assert unknown.status_code == 404 and unknown.json()["error"]["field"] == "previous_response_id"


@pytest.mark.parametrize("stream", [False, True])
def test_unenforceable_schemas_and_combinations_are_400s_naming_the_field(url, local_stack, stream):
    schema, keyword = UNENFORCEABLE[local_stack[1].guide_backend]
    cases = [
        ("/v1/responses", {"input": "x", "text": _fmt("p", schema)}, f"text.format.schema.properties.code.{keyword}"),
        (
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": "x"}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}},
            },
            f"response_format.json_schema.schema.properties.code.{keyword}",
        ),
        (
            "/v1/messages",
            {
                "max_tokens": 8,
                "messages": [{"role": "user", "content": "x"}],
                "output_config": {"format": {"type": "json_schema", "schema": schema}},
            },
            f"output_config.format.schema.properties.code.{keyword}",
        ),
        ("/v1/responses", {"input": "x", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
        ("/v1/responses", {"input": "x", "text": _fmt("verdict"), "tools": [CALC_TOOL]}, "text.format"),
        (
            "/v1/responses",
            {"input": "x", "text": _fmt("verdict"), "metadata": {"rollgate_ignore_eos": "true"}},
            "metadata.rollgate_ignore_eos",
        ),
    ]
    for path, body, field in cases:
        resp = httpx.post(url + path, json=dict(body, model=MODEL, stream=stream), timeout=30)
        assert resp.status_code == 400, (path, resp.text)
        assert resp.json()["error"]["field"] == field


def test_sdk_sees_a_bad_request_for_an_unsupported_keyword(url, local_stack):
    schema, keyword = UNENFORCEABLE[local_stack[1].guide_backend]
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    with pytest.raises(openai.BadRequestError, match=keyword) as err:
        client.responses.create(model=MODEL, input="x", text=_fmt("p", schema), max_output_tokens=8)
    assert err.value.body["field"] == f"text.format.schema.properties.code.{keyword}"


async def test_llguidance_enforces_keywords_beyond_the_native_subset(url, local_stack):
    if local_stack[1].guide_backend != "llguidance":
        pytest.skip("the native guide refuses these keywords (test_unenforceable_schemas_...)")
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)
    answers = await asyncio.gather(
        *(
            client.responses.create(
                model=MODEL, input="JSON.", text=_fmt("w", WIDER), max_output_tokens=MAX_TOKENS, extra_body={"seed": s}
            )
            for s in range(4)
        )
    )
    checker = jsonschema.Draft202012Validator(WIDER, format_checker=jsonschema.FormatChecker())
    for resp in answers:
        assert resp.status == "completed", resp.output_text
        checker.validate(json.loads(resp.output_text))


@pytest.mark.parametrize("stream", [False, True])
def test_a_backend_without_constrained_decoding_refuses_every_format(scripted_url, stream):
    cases = [
        ("/v1/responses", {"input": "x", "text": _fmt("verdict")}, "text.format"),
        ("/v1/responses", {"input": "x", "text": {"format": {"type": "json_object"}}}, "text.format"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}},
            "response_format",
        ),
        (
            "/v1/messages",
            {
                "max_tokens": 8,
                "messages": [{"role": "user", "content": "x"}],
                "output_config": {"format": {"type": "json_schema", "schema": SCHEMAS["verdict"]}},
            },
            "output_config.format",
        ),
    ]
    for path, body, field in cases:
        resp = httpx.post(scripted_url + path, json=dict(body, model=MODEL, stream=stream), timeout=30)
        assert resp.status_code == 400 and resp.json()["error"]["field"] == field, resp.text
        assert "cannot enforce" in resp.json()["error"]["message"]
    plain = httpx.post(
        scripted_url + "/v1/responses", json={"model": MODEL, "input": "x", "text": {"format": {"type": "text"}}}
    )
    assert plain.status_code == 200


async def test_vllm_backend_hands_the_format_to_vllm_structured_outputs(tiny_model_dir):
    seen: list = []
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    with serve_in_thread(fake_vllm("r0", seen, eos=tokenizer.eos_token_id)) as upstream:
        service = ModelService(VllmBackend([upstream], tokenizer, model="tiny", timeout_s=10), served_name=MODEL)
        try:
            await service.create({"model": MODEL, "input": "x", "text": _fmt("p", PATTERN)})  # vLLM enforces patterns
            await service.create({"model": MODEL, "input": "x", "text": {"format": {"type": "json_object"}}})
            await service.create({"model": MODEL, "input": "x"})
        finally:
            await service.aclose()
    sent = [body.get("structured_outputs") for _, body in seen]
    assert sent == [{"json": PATTERN}, {"json_object": True}, None]


def _recording_upstream(seen: list) -> FastAPI:
    """A stand-in for a hosted Responses API (none can be reached here): records what it is sent."""
    app = FastAPI()

    @app.post("/v1/responses")
    async def responses(request: Request):
        body = await request.json()
        seen.append(body)
        text = {"type": "output_text", "text": '{"answer": "yes"}', "annotations": []}
        message = {"type": "message", "id": "m", "role": "assistant", "status": "completed", "content": [text]}
        return {
            "id": "resp_1",
            "object": "response",
            "status": "completed",
            "model": body["model"],
            "output": [message],
        }

    return app


async def test_passthrough_forwards_the_format_from_every_dialect():
    from rollgate.model_server.dialects import chat_completions, messages

    seen: list = []
    with serve_in_thread(_recording_upstream(seen)) as upstream:
        service = ModelService(OpenAIPassthrough(upstream), served_name=MODEL)
        try:
            await service.create({"model": MODEL, "input": "x", "text": _fmt("verdict")})
            await chat_completions.create(
                service,
                {
                    "model": MODEL,
                    "messages": [{"role": "user", "content": "x"}],
                    "response_format": {
                        "type": "json_schema",
                        "json_schema": {"name": "v", "schema": SCHEMAS["verdict"]},
                    },
                },
            )
            await messages.create(
                service,
                {
                    "model": MODEL,
                    "max_tokens": 8,
                    "messages": [{"role": "user", "content": "x"}],
                    "output_config": {"format": {"type": "json_schema", "schema": SCHEMAS["verdict"]}},
                },
            )
        finally:
            with contextlib.suppress(Exception):
                await service.aclose()
    assert [body["text"]["format"]["schema"] for body in seen] == [SCHEMAS["verdict"]] * 3


def test_an_unknown_guide_backend_is_refused_naming_the_setting():
    from pydantic import ValidationError

    from rollgate.core.settings import ModelSettings

    assert ModelSettings().guide_backend == "native"
    with pytest.raises(ValidationError, match="guide_backend"):
        ModelSettings(guide_backend="xgrammar")
    with pytest.raises(ValueError, match="settings.model.guide_backend"):
        guide_index("outlines", None, {0})
