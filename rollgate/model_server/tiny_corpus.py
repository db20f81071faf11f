"""Synthetic agent transcripts for the tiny model: the corpus its tokenizer is trained on and the
warm-up data that teaches it the chat format (tool calls in <tool_call> tags, a final answer, the
end-of-turn token). Deterministic for a given random.Random."""

from __future__ import annotations

import random
from typing import Any

# Tool shapes the shipped environments use (names and argument kinds), so the warm-up teaches the
# model the calls rollouts will actually ask of it.
TOOL_POOL: list[dict[str, Any]] = [
    {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
    {
        "name": "submit_answer",
        "description": "Submit the final answer.",
        "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
    },
    {
        "name": "move",
        "description": "Slide the tiles.",
        "parameters": {
            "type": "object",
            "properties": {"direction": {"type": "string", "enum": ["up", "down", "left", "right"]}},
            "required": ["direction"],
        },
    },
    {
        "name": "guess",
        "description": "Guess a five-letter word.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
    },
    {
        "name": "run_python",
        "description": "Run Python code and return its output.",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    },
    {
        "name": "search",
        "description": "Search the records.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
    {
        "name": "add",
        "description": "Add an amount to the counter.",
        "parameters": {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]},
    },
    {
        "name": "send_email",
        "description": "Send an email.",
        "parameters": {
            "type": "object",
            "properties": {"to": {"type": "string"}, "subject": {"type": "string"}},
            "required": ["to", "subject"],
        },
    },
]
WORDS = ["crane", "slate", "apple", "house", "light", "plant", "stone", "river", "cloud", "brick"]
NAMES = ["ana", "bo", "chen", "dev", "eli", "fay", "gus", "hana"]
SYSTEMS = [
    "You are a helpful assistant.",
    "Solve the task. Use the tools when useful.",
    "You are an agent. Think, call tools, then answer.",
]


def _args_for(tool: dict[str, Any], rng: random.Random, a: int, b: int) -> dict[str, Any]:
    name = tool["name"]
    if name == "calculator":
        return {"expression": f"{a} + {b}"}
    if name == "submit_answer":
        return {"answer": str(a + b)}
    if name == "move":
        return {"direction": rng.choice(["up", "down", "left", "right"])}
    if name == "guess":
        return {"word": rng.choice(WORDS)}
    if name == "run_python":
        return {"code": f"print({a} + {b})"}
    if name == "search":
        return {"query": rng.choice(WORDS)}
    if name == "add":
        return {"amount": rng.randint(1, 5)}
    return {"to": f"{rng.choice(NAMES)}@example.com", "subject": rng.choice(WORDS)}


def transcript(rng: random.Random) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One synthetic episode as (chat messages, tools)."""
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    messages: list[dict[str, Any]] = []
    if rng.random() < 0.7:
        messages.append({"role": "system", "content": rng.choice(SYSTEMS)})
    question = rng.choice([f"What is {a} + {b}?", f"Compute {a} plus {b}.", f"Add {a} and {b}."])
    messages.append({"role": "user", "content": question})
    if rng.random() < 0.15:  # some episodes have no tools: answer directly
        messages.append({"role": "assistant", "content": f"The answer is {a + b}."})
        return messages, []
    tools = rng.sample(TOOL_POOL, k=rng.randint(1, 3))
    steps = rng.randint(1, 2)
    for _ in range(steps):
        tool = tools[0]  # the first listed tool: a simple rule the tiny model can learn to copy
        args = _args_for(tool, rng, a, b)
        msg: dict[str, Any] = {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": tool["name"], "arguments": args}}],
        }
        if rng.random() < 0.3:
            msg["reasoning_content"] = f"I should call {tool['name']}."
        messages.append(msg)
        result = str(a + b) if tool["name"] in ("calculator", "run_python") else rng.choice(["ok", "done", "no"])
        messages.append({"role": "tool", "content": result})
    messages.append({"role": "assistant", "content": rng.choice([f"The answer is {a + b}.", f"{a + b}", "done"])})
    return messages, tools
