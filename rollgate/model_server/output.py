"""From generated text to Responses output items and the response object.

The template's conventions: `<think>...</think>` is reasoning, each
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` is a function call, the rest is the
message. A tool call whose text does not parse stays part of the message (the trainer still sees
exactly what the model wrote, and the agent can tell the model it was malformed).

Items come in the order reasoning, message, function calls, except that a message whose text
starts before the first tag comes first: a stream has announced it already (see textstream)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from rollgate.core.schemas import new_id
from rollgate.model_server.wire import ResponsesRequest

THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
TAGS = ("<think>", "<tool_call>")  # where structured output starts


@dataclass
class Generation:
    """What a backend produced for one call."""

    text: str
    finish_reason: str  # "stop" | "length"
    prompt_ids: list[int] | None = None
    token_ids: list[int] | None = None
    log_probs: list[float] | None = None
    weight_version: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# One encoder, built once: json.dumps with options builds a new one per call (a few us each).
_ARGS_JSON = json.JSONEncoder(ensure_ascii=False)


def parse_text(text: str) -> list[dict[str, Any]]:
    """Output items (without token data) for generated text."""
    items: list[dict[str, Any]] = []
    reasoning = "".join(m.group(1) for m in THINK.finditer(text))
    rest = THINK.sub("", text)
    if reasoning.strip():
        items.append(
            {
                "type": "reasoning",
                "id": new_id("rs"),
                "status": "completed",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": reasoning.strip()}],
            }
        )
    starts = [i for i in (text.find(t) for t in TAGS) if i >= 0]
    message_first = bool(text[: min(starts, default=len(text))].strip())
    calls: list[dict[str, Any]] = []

    def take(match: re.Match) -> str:
        call = _parse_call(match.group(1))
        if call is None:
            return match.group(0)  # unparseable: keep the text as the model wrote it
        calls.append(call)
        return ""

    rest = TOOL_CALL.sub(take, rest).strip()
    if rest or not calls:
        items.insert(0 if message_first else len(items), _message(rest))
    items.extend(calls)
    return items


def message_only(text: str) -> list[dict[str, Any]]:
    """Structured output: the whole text is the message (a JSON string may hold tag-like text)."""
    return [_message(text.strip())]


def _message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": new_id("msg"),
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def _parse_call(body: str) -> dict[str, Any] | None:
    try:
        data = json.loads(body.strip())
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        return None
    args = data.get("arguments", {})
    if isinstance(args, str):
        try:
            json.loads(args)
        except ValueError:
            return None
    else:
        args = _ARGS_JSON.encode(args)
    return {
        "type": "function_call",
        "id": new_id("fc"),
        "call_id": new_id("call"),
        "name": data["name"],
        "arguments": args,
        "status": "completed",
    }


def _text_format(request: ResponsesRequest) -> dict[str, Any]:
    """The request's `text.format`, echoed as OpenAI does (plain text when none was asked for)."""
    text = (request.model_extra or {}).get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    return fmt if isinstance(fmt, dict) else {"type": "text"}


def attach_tokens(items: list[dict[str, Any]], gen: Generation) -> None:
    """Training mode: every model-produced item carries the call's token data (NeMo Gym's names)."""
    if gen.token_ids is None or gen.prompt_ids is None:
        return
    for item in items:
        item["prompt_token_ids"] = gen.prompt_ids
        item["generation_token_ids"] = gen.token_ids
        item["generation_log_probs"] = gen.log_probs or [0.0] * len(gen.token_ids)
        item["weight_version"] = gen.weight_version


def build_response(
    request: ResponsesRequest,
    model: str,
    output: list[dict[str, Any]],
    *,
    input_tokens: int,
    output_tokens: int,
    finish_reason: str,
    temperature: float,
    top_p: float,
    max_output_tokens: int | None,
    response_id: str | None = None,
    created_at: int | None = None,
) -> dict[str, Any]:
    incomplete = finish_reason == "length"
    return {
        "id": response_id or new_id("resp"),
        "object": "response",
        "created_at": int(time.time()) if created_at is None else created_at,
        "model": model,
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "error": None,
        "instructions": request.instructions,
        "metadata": request.metadata or {},
        "output": output,
        "parallel_tool_calls": request.parallel_tool_calls,
        "tool_choice": request.tool_choice if isinstance(request.tool_choice, (str, dict)) else "auto",
        "tools": [t.model_dump(exclude_none=True) for t in (request.tools or [])],
        "temperature": temperature,
        "top_p": top_p,
        "max_output_tokens": max_output_tokens,
        "text": {"format": _text_format(request)},
        "truncation": "disabled",
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }
