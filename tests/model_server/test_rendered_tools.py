"""A chat template without tool support (plain ChatML, as SmolLM2 ships) on the tiny tokenizer: the
tools go into the system prompt in the Hermes format, calls in the output are parsed back, and
token-in/token-out across a turn with a tool call and its output stays exact."""

from __future__ import annotations

import json

import openai
import pytest
from transformers import AutoTokenizer

from rollgate.core.serving import serve_in_thread
from rollgate.model_server.app import create_model_app
from rollgate.model_server.chat import PromptBuilder, inline_tools
from rollgate.model_server.output import OutputParser
from rollgate.model_server.scripted import ScriptedBackend
from rollgate.model_server.service import ModelService
from rollgate.model_server.templates import resolve_chat_template
from rollgate.model_server.toolcalls import TOOL_CALL_FORMATS, parse_tool_choice
from tests.devices import TEST_DEVICE
from tests.model_server.conftest import CALC_TOOL

MODEL = "rollgate-tiny"
CHATML = resolve_chat_template("chatml")
TEMPLATE_TOOL = {"name": "calculator", "description": "Evaluate.", "parameters": CALC_TOOL["parameters"]}


@pytest.fixture(scope="module")
def chatml_service(tiny_model_dir):
    from rollgate.model_server.local import LocalBackend

    backend = LocalBackend.from_pretrained(tiny_model_dir, device=TEST_DEVICE)
    yield ModelService(backend, chat_template=CHATML)
    backend.engine.close()


@pytest.fixture(scope="module")
def url(chatml_service):
    with serve_in_thread(create_model_app(chatml_service)) as base:
        yield base


def test_a_template_without_tools_is_detected_and_the_tools_go_into_the_system_prompt(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert PromptBuilder(tok).native_tools  # the tiny model's own template renders tools
    builder = PromptBuilder(tok, chat_template=CHATML)
    assert not builder.native_tools
    text = builder.render([{"role": "user", "content": "2+2?"}], [TEMPLATE_TOOL], True)
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\n# Tools")
    assert json.dumps({"type": "function", "function": TEMPLATE_TOOL}, ensure_ascii=False) in system
    assert "<tool_call>" in system and text.endswith("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n")


def test_a_given_system_prompt_keeps_its_text_before_the_tools():
    out = inline_tools([{"role": "system", "content": "Be brief."}], [TEMPLATE_TOOL], TOOL_CALL_FORMATS["hermes"])
    assert out[0]["content"].startswith("Be brief.\n\n# Tools") and len(out) == 1


def test_calls_and_results_in_history_become_text_in_the_format_prefix_stably():
    hermes = TOOL_CALL_FORMATS["hermes"]
    call = {"type": "function", "id": "c1", "function": {"name": "calculator", "arguments": {"expression": "1+1"}}}
    chat = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [call, call]},
        {"role": "tool", "content": "2", "tool_call_id": "c1"},
        {"role": "tool", "content": "3", "tool_call_id": "c1"},
    ]
    out = inline_tools(chat, [], hermes)
    written = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"}}\n</tool_call>'
    assert out[1] == {"role": "assistant", "content": f"{written}\n{written}"}
    assert out[2:] == [
        {"role": "user", "content": "<tool_response>\n2\n</tool_response>\n<tool_response>\n3\n</tool_response>"}
    ]
    assert inline_tools(chat[:2], [], hermes) == out[:2]
    # what the service writes back parses back to the same calls
    parsed = OutputParser().parse(out[1]["content"], ["calculator"])
    assert [(i["name"], json.loads(i["arguments"])) for i in parsed] == [("calculator", {"expression": "1+1"})] * 2


def test_a_hermes_call_written_by_the_model_is_parsed_back_into_a_function_call(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    service = ModelService(ScriptedBackend(tok, max_context=2048), chat_template=CHATML)
    with serve_in_thread(create_model_app(service)) as base:
        text = 'Let me compute. <tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>'
        resp = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0).responses.create(
            model=MODEL, input="6*7?", tools=[CALC_TOOL], metadata={"rollgate_script": json.dumps([{"text": text}])}
        )
    assert [i.type for i in resp.output] == ["message", "function_call"]
    assert resp.output_text == "Let me compute."
    assert json.loads(resp.output[1].arguments) == {"expression": "6*7"}


@pytest.mark.parametrize("seed", (0, 1, 2))
def test_required_on_a_tool_less_template_calls_the_tool(url, seed):
    resp = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120).responses.create(
        model=MODEL, input="2+2?", tools=[CALC_TOOL], tool_choice="required", extra_body={"seed": seed}
    )
    [call] = [i for i in resp.output if i.type == "function_call"]
    assert call.name == "calculator" and isinstance(json.loads(call.arguments)["expression"], str)


async def test_token_in_token_out_across_a_tool_call_and_its_output_is_exact(chatml_service):
    service = chatml_service
    first = await service.create(
        {
            "model": MODEL,
            "input": "2+2?",
            "tools": [CALC_TOOL],
            "tool_choice": {"type": "function", "name": "calculator"},
            "seed": 3,
            "metadata": {"rollgate_training": "true"},
        }
    )
    [call] = [i for i in first["output"] if i["type"] == "function_call"]
    turn1 = call["prompt_token_ids"] + call["generation_token_ids"]
    assert call["generation_token_ids"][-1] == service.prompts.eos_id
    # the forced tokens of the format (probability 1 under the constraint) have log-prob 0
    prefix = service.prompts.encode("<tool_call>\n")
    assert call["generation_token_ids"][: len(prefix)] == prefix
    assert call["generation_log_probs"][: len(prefix)] == [0.0] * len(prefix)
    result = {"type": "function_call_output", "call_id": call["call_id"], "output": "4"}
    drift = service.prompts.drift
    second = await service.create(
        {
            "model": MODEL,
            "input": [{"role": "user", "content": "2+2?"}, *first["output"], result],
            "tools": [CALC_TOOL],
            "seed": 3,
            "max_output_tokens": 4,
            "metadata": {"rollgate_training": "true"},
        }
    )
    prompt2 = second["output"][0]["prompt_token_ids"]
    assert prompt2[: len(turn1)] == turn1  # turn 2 extends turn 1's prompt and generation exactly
    tail = service.prompts.decode(prompt2[len(turn1) :])
    assert tail == "\n<|im_start|>user\n<tool_response>\n4\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert service.prompts.drift == drift


def test_tool_choice_parsing_accepts_the_documented_forms():
    assert parse_tool_choice(None, []).mode == "auto"
    assert parse_tool_choice("none", []).mode == "none"
    assert parse_tool_choice("required", ["a"]).forced
    assert parse_tool_choice({"type": "function", "name": "a"}, ["a"]).name == "a"


def test_llama3_json_calls_are_parsed_and_a_mixed_reply_stays_text():
    parser = OutputParser(TOOL_CALL_FORMATS["llama3_json"])
    items = parser.parse('{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}', ["a", "b"])
    assert [(i["type"], i.get("name")) for i in items] == [("function_call", "a"), ("function_call", "b")]
    assert [i["type"] for i in parser.parse('{"name": "a", "parameters": {}} and more', ["a"])] == ["message"]


def test_unknown_template_and_format_settings_name_the_field():
    with pytest.raises(ValueError, match="model.chat_template.*chatml"):
        resolve_chat_template("no-such-template")
    with pytest.raises(ValueError, match="model.tool_call_format.*hermes"):
        ModelService(ScriptedBackend(), tool_call_format="nope")
    with pytest.raises(ValueError, match="model.reasoning_format"):
        ModelService(ScriptedBackend(), reasoning_format="nope")


def test_settings_select_the_template(tiny_model_dir):
    from rollgate.core.settings import Settings
    from rollgate.model_server.server import build_service

    settings = Settings(model={"model_path": tiny_model_dir, "chat_template": "chatml", "device": TEST_DEVICE})
    service = build_service(settings)
    try:
        assert service.prompts is not None and not service.prompts.native_tools
        assert service.prompts.chat_template == CHATML
    finally:
        service.backend.engine.close()  # type: ignore[union-attr]
