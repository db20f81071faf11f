"""Token-in/token-out: a multi-turn conversation's prompts extend the previous call's exact token
ids; the history is never re-tokenized."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from tests.model_server.conftest import CALC_TOOL


def _next_input(history: list[dict[str, Any]], output: list[dict[str, Any]], turn: int) -> list[dict[str, Any]]:
    """What an agent does: echo the output items unchanged, then add tool results (or a user nudge)."""
    history = history + output
    calls = [i for i in output if i["type"] == "function_call"]
    for call in calls:
        history.append({"type": "function_call_output", "call_id": call["call_id"], "output": f"result {turn}"})
    if not calls:
        history.append({"role": "user", "content": f"Go on, step {turn}."})
    return history


async def _run_episode(service, *, turns: int, max_tokens: int, seed: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "user", "content": "What is 12 + 30?"}]
    responses = []
    for turn in range(turns):
        resp = await service.create(
            {
                "model": "rollgate-tiny",
                "input": history,
                "tools": [CALC_TOOL],
                "instructions": "Use the tools.",
                "max_output_tokens": max_tokens,
                "temperature": 1.0,
                "seed": seed + turn,
                "metadata": {"rollgate_training": "true"},
            }
        )
        responses.append(resp)
        history = _next_input(history, resp["output"], turn)
    return responses


def _tokens(resp: dict[str, Any]) -> tuple[list[int], list[int], list[float]]:
    item = resp["output"][0]
    return item["prompt_token_ids"], item["generation_token_ids"], item["generation_log_probs"]


async def test_each_turn_prompt_extends_previous_prompt_and_generation(local_stack):
    service, backend, _ = local_stack
    tok = backend.tokenizer
    responses = await _run_episode(service, turns=3, max_tokens=48, seed=7)
    for resp in responses:  # every model-produced item carries the same token data
        first = _tokens(resp)
        assert all(
            (i["prompt_token_ids"], i["generation_token_ids"], i["generation_log_probs"]) == first
            for i in resp["output"]
        )
        assert len(first[1]) == len(first[2]) > 0 and all(lp <= 0.0 for lp in first[2])
        assert resp["output"][0]["weight_version"] == "w0"
    for prev, cur in pairwise(responses):
        p_prompt, p_gen, _ = _tokens(prev)
        c_prompt, _, _ = _tokens(cur)
        prefix = p_prompt + p_gen
        if p_gen[-1] != tok.eos_token_id:  # cut at max tokens: the end-of-turn token is added once
            prefix = prefix + [tok.eos_token_id]
        assert c_prompt[: len(prefix)] == prefix
        tail = tok.decode(c_prompt[len(prefix) :], skip_special_tokens=False)
        assert tail.startswith("\n<|im_start|>")
        assert tail.endswith("<|im_start|>assistant\n")
        assert tok.eos_token not in tok.decode(c_prompt[len(prefix) : len(prefix) + 1])


async def test_decoded_prompt_reproduces_the_transcript(local_stack):
    service, backend, _ = local_stack
    tok = backend.tokenizer
    responses = await _run_episode(service, turns=3, max_tokens=32, seed=11)
    last_prompt, _, _ = _tokens(responses[-1])
    text = tok.decode(last_prompt, skip_special_tokens=False)
    # the system turn with the tools, the user turn, and every earlier generation verbatim
    assert text.startswith("<|im_start|>system\nUse the tools.\n\n# Tools")
    assert '"name": "calculator"' in text and "What is 12 + 30?" in text
    for resp in responses[:-1]:
        _, gen, _ = _tokens(resp)
        assert tok.decode(gen, skip_special_tokens=False).removesuffix("<|im_end|>") in text
    assert text.count("<|im_start|>assistant\n") == 3
    assert text.endswith("<|im_start|>assistant\n")


async def test_first_turn_prompt_is_the_rendered_chat(local_stack):
    service, backend, _ = local_stack
    resp = await service.create(
        {"model": "rollgate-tiny", "input": "hello", "max_output_tokens": 4, "metadata": {"rollgate_training": "true"}}
    )
    prompt, gen, _ = _tokens(resp)
    assert (
        backend.tokenizer.decode(prompt, skip_special_tokens=False)
        == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    )
    assert resp["usage"]["input_tokens"] == len(prompt) and resp["usage"]["output_tokens"] == len(gen)


async def test_token_fields_absent_without_training_mode(local_stack):
    service, _, _ = local_stack
    resp = await service.create({"model": "rollgate-tiny", "input": "hello", "max_output_tokens": 4})
    assert resp["output"] and not any("generation_token_ids" in item for item in resp["output"])


async def test_truncated_generation_is_incomplete_with_max_output_tokens_reason(local_stack):
    service, backend, _ = local_stack
    resp = await service.create(
        {
            "model": "rollgate-tiny",
            "input": "Say a lot.",
            "max_output_tokens": 1,
            "temperature": 0,
            "metadata": {"rollgate_training": "true"},
        }
    )
    _, gen, _ = _tokens(resp)
    if gen[-1] != backend.tokenizer.eos_token_id:  # unless the single token happened to be the end-of-turn token
        assert resp["status"] == "incomplete"
        assert resp["incomplete_details"] == {"reason": "max_output_tokens"}
    assert len(gen) == 1
