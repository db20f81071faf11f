"""The scripted backend: a deterministic, instant policy with real token ids."""

from __future__ import annotations

import asyncio
import json

import pytest
from transformers import AutoTokenizer

from rollgate.core.errors import BadRequest
from rollgate.model_server.scripted import ScriptedBackend, example_value
from rollgate.model_server.service import ModelService
from tests.model_server.conftest import CALC_TOOL

MOVE_TOOL = {
    "type": "function",
    "name": "move",
    "parameters": {
        "type": "object",
        "properties": {
            "direction": {"type": "string", "enum": ["up", "down"]},
            "steps": {"type": "integer", "minimum": 2},
            "note": {"type": "string"},
        },
        "required": ["direction", "steps"],
    },
}


@pytest.fixture
def service(tiny_model_dir):
    return ModelService(ScriptedBackend(AutoTokenizer.from_pretrained(tiny_model_dir), max_context=2048))


async def test_default_policy_calls_first_tool_then_answers_done(service):
    req = {
        "model": "rollgate-tiny",
        "input": "go",
        "tools": [MOVE_TOOL, CALC_TOOL],
        "metadata": {"rollgate_training": "true"},
    }
    first = await service.create(req)
    call = first["output"][0]
    assert call["type"] == "function_call" and call["name"] == "move"
    assert json.loads(call["arguments"]) == {"direction": "up", "steps": 2}
    assert call["generation_log_probs"] == [0.0] * len(call["generation_token_ids"])
    history = [
        {"role": "user", "content": "go"},
        *first["output"],
        {"type": "function_call_output", "call_id": call["call_id"], "output": "ok"},
    ]
    second = await service.create({**req, "input": history})
    assert second["output"][0]["type"] == "message"
    assert second["output"][0]["content"][0]["text"] == "done"
    prefix = call["prompt_token_ids"] + call["generation_token_ids"]
    assert second["output"][0]["prompt_token_ids"][: len(prefix)] == prefix


async def test_script_in_metadata_plays_turn_by_tool_outputs(service):
    script = json.dumps([{"call": {"name": "calculator", "arguments": {"expression": "1+1"}}}, {"text": "2"}])
    req = {"model": "rollgate-tiny", "input": "q", "tools": [CALC_TOOL], "metadata": {"rollgate_script": script}}
    first = await service.create(req)
    assert first["output"][0]["name"] == "calculator"
    out = {"type": "function_call_output", "call_id": first["output"][0]["call_id"], "output": "2"}
    second = await service.create({**req, "input": [{"role": "user", "content": "q"}, *first["output"], out]})
    assert second["output"][0]["content"][0]["text"] == "2"


async def test_bad_script_names_the_field(service):
    with pytest.raises(BadRequest) as info:
        await service.create({"model": "rollgate-tiny", "input": "q", "metadata": {"rollgate_script": '[{"x": 1}]'}})
    assert info.value.field == "metadata.rollgate_script"


async def test_a_turn_with_delay_s_waits_before_answering():
    service = ModelService(ScriptedBackend())
    script = json.dumps([{"text": "slow", "delay_s": 30}])
    call = asyncio.create_task(
        service.create({"model": "rollgate-tiny", "input": "q", "metadata": {"rollgate_script": script}})
    )
    await asyncio.sleep(0.2)
    assert not call.done()  # held mid-flight, as a slow model holds an episode
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    fast = json.dumps([{"text": "now", "delay_s": 0}])
    resp = await service.create({"model": "rollgate-tiny", "input": "q", "metadata": {"rollgate_script": fast}})
    assert resp["output"][0]["content"][0]["text"] == "now"


@pytest.mark.parametrize("delay", [-1, 61, "1", True])
async def test_a_bad_delay_s_names_the_field(delay):
    service = ModelService(ScriptedBackend())
    script = json.dumps([{"text": "x", "delay_s": delay}])
    with pytest.raises(BadRequest) as info:
        await service.create({"model": "rollgate-tiny", "input": "q", "metadata": {"rollgate_script": script}})
    assert info.value.field == "metadata.rollgate_script" and "delay_s" in str(info.value)


async def test_without_tokenizer_it_answers_text_only():
    service = ModelService(ScriptedBackend())
    resp = await service.create(
        {"model": "rollgate-tiny", "input": "q", "tools": [CALC_TOOL], "metadata": {"rollgate_training": "true"}}
    )
    assert resp["output"][0]["name"] == "calculator" and "generation_token_ids" not in resp["output"][0]


def test_example_values_follow_the_schema():
    assert example_value(
        {"type": "object", "properties": {"a": {"type": "integer", "minimum": 3}, "b": {"type": "boolean"}}}
    ) == {"a": 3, "b": False}
    assert example_value({"anyOf": [{"type": "null"}, {"type": "string"}]}) is None
    assert example_value({"type": "string", "minLength": 3}) == "aaa"
