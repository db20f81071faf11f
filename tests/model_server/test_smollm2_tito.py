"""Token-in/token-out on a real pretrained model: SmolLM2-135M-Instruct, fetched and converted by
`rollgate model get` (the `smollm2_path` fixture, cached between runs), served by the local backend
with its own ChatML template. That template has no tool support, so the tools are rendered into its
system prompt in the Hermes format and calls are parsed back; multi-turn episodes with tool calls
and tool outputs must still extend each call's exact ids: through the model service, through the
agent loop and through the capture proxy (Chat Completions, the official openai SDK)."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import httpx
import openai
import pytest

from rollgate.agent_server.agent import Agent
from rollgate.core.rows import parse_row
from rollgate.core.schemas import Outcome
from rollgate.core.serving import serve_in_thread
from rollgate.core.session_store import MemorySessionStore
from rollgate.core.settings import AgentSettings, Settings
from rollgate.model_server.app import create_model_app
from rollgate.model_server.client import LocalModelClient
from rollgate.model_server.server import build_service
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.client import LocalEnvClient
from rollgate.resources_servers.registry import load_env
from tests.devices import TEST_DEVICE
from tests.model_server.conftest import CALC_TOOL

MODEL = "smollm2"
QUESTION = "What is 12 + 30? Use the calculator."


@pytest.fixture(scope="module")
def smol(smollm2_path):
    settings = Settings(
        model={"model_path": smollm2_path, "served_name": MODEL, "device": TEST_DEVICE, "reasoning_format": "none"}
    )
    service = build_service(settings)
    assert not service.prompts.native_tools  # the point of this module: tools rendered into the prompt
    yield service
    service.backend.engine.close()


def _exact_prefix(prev_prompt: list[int], prev_gen: list[int], eos: int) -> list[int]:
    prefix = prev_prompt + prev_gen
    return prefix if prev_gen and prev_gen[-1] == eos else [*prefix, eos]


async def _episode(service, turns: list[str]) -> list[dict[str, Any]]:
    """Echo each output unchanged, answer its tool calls, nudge with a user turn otherwise; the
    tool_choice of each turn comes from `turns` ("required" makes a call certain)."""
    history: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    responses = []
    for turn, choice in enumerate(turns):
        resp = await service.create(
            {
                "model": MODEL,
                "input": history,
                "tools": [CALC_TOOL],
                "tool_choice": choice,
                "max_output_tokens": 64,
                "temperature": 0.0,
                "metadata": {"rollgate_training": "true"},
            }
        )
        responses.append(resp)
        history = history + resp["output"]
        calls = [i for i in resp["output"] if i["type"] == "function_call"]
        for c in calls:
            history.append({"type": "function_call_output", "call_id": c["call_id"], "output": "42"})
        if not calls:
            history.append({"role": "user", "content": f"Thanks. Step {turn}: say it again."})
    return responses


async def test_turns_with_tool_calls_extend_the_exact_previous_ids(smol):
    drift_before = smol.prompts.drift
    responses = await _episode(smol, ["required", "auto", "auto"])
    first = responses[0]["output"]
    assert [i["type"] for i in first] == ["function_call"] and first[0]["name"] == "calculator"
    eos = smol.prompts.eos_id
    tokens = [(r["output"][0]["prompt_token_ids"], r["output"][0]["generation_token_ids"]) for r in responses]
    for (p0, g0), (p1, _) in pairwise(tokens):
        prefix = _exact_prefix(p0, g0, eos)
        assert p1[: len(prefix)] == prefix and len(p1) > len(prefix)
    assert smol.prompts.drift == drift_before  # the template rendered every tail prefix-stably


async def test_naive_retokenization_drifts_on_this_template_and_rollgate_does_not(smol):
    """What a framework that re-renders and re-encodes the history gets on SmolLM2, against the
    exact ids Rollgate extends: the sampled call does not survive a round trip through text."""
    [resp, nxt] = await _episode(smol, ["required", "auto"])
    item = resp["output"][0]
    exact = _exact_prefix(item["prompt_token_ids"], item["generation_token_ids"], smol.prompts.eos_id)
    assert nxt["output"][0]["prompt_token_ids"][: len(exact)] == exact  # Rollgate: exact
    tok = smol.prompts.tokenizer
    # naive: the decoded transcript, templated and encoded again
    naive = tok.encode(tok.decode(exact, skip_special_tokens=False), add_special_tokens=False)
    assert naive != exact
    first_diff = next(i for i, (a, b) in enumerate(zip(naive, exact, strict=False)) if a != b)
    assert first_diff >= len(item["prompt_token_ids"])  # the drift is in the model's own tokens


async def test_agent_episodes_on_smollm2_are_token_exact_with_tool_outputs(smol):
    math = LocalEnvClient(EnvRuntime(load_env("math"), MemorySessionStore()))
    agent = Agent(LocalModelClient(smol), {"math": math}, AgentSettings(max_turns=3), model_name=MODEL)
    row = {
        # greedy: a sampled forced call may ramble past its budget inside a string and end as text
        "responses_create_params": {
            "input": QUESTION,
            "tool_choice": "required",
            "max_output_tokens": 96,
            "temperature": 0.0,
        },
        "env": "math",
        "expected_answer": "42",
    }
    traj = await agent.run(parse_row(row, known_envs=agent.envs))
    assert traj.outcome in (Outcome.completed, Outcome.truncated) and traj.error is None
    assert len(traj.turns) == 3 and traj.metrics["tool_calls"] >= 3 and traj.metrics["token_drift"] == 0
    eos = smol.prompts.eos_id
    for a, b in pairwise(traj.turns):
        prefix = _exact_prefix(a.prompt_token_ids, a.generation_token_ids, eos)
        assert b.prompt_token_ids[: len(prefix)] == prefix
    await math.runtime.env.aclose()


def test_the_capture_proxy_records_exact_chat_completions_turns(smol):
    tool = {"type": "function", "function": {k: CALC_TOOL[k] for k in ("name", "description", "parameters")}}
    with serve_in_thread(create_model_app(smol)) as base:
        client = openai.OpenAI(base_url=base + "/capture/smol-chat/v1", api_key="unused", max_retries=0, timeout=300)
        messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
        for turn, choice in enumerate(["required", "auto", "auto"]):
            resp = client.chat.completions.create(
                model=MODEL, messages=messages, tools=[tool], tool_choice=choice, max_tokens=64, temperature=0.0
            )
            msg = resp.choices[0].message
            assert turn or msg.tool_calls  # required: a call to the declared tool
            messages.append(msg.model_dump(exclude_none=True))
            for call in msg.tool_calls or []:
                messages.append({"role": "tool", "tool_call_id": call.id, "content": "42"})
            if not msg.tool_calls:
                messages.append({"role": "user", "content": "Thanks. Say it again."})
        calls = httpx.get(base + "/v1/captures/smol-chat", timeout=30).json()["calls"]
    assert [c["index"] for c in calls] == [0, 1, 2]
    eos = smol.prompts.eos_id
    for prev, cur in pairwise(calls):
        prefix = _exact_prefix(prev["prompt_token_ids"], prev["choices"][0]["generation_token_ids"], eos)
        assert cur["extends"] == prev["index"] and cur["prompt_token_ids"][: len(prefix)] == prefix
