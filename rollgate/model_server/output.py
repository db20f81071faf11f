"""From generated text to Responses output items and the response object.

The model's conventions (per-model settings): a reasoning format (`<think>...</think>` by default)
marks reasoning, a tool-call format (toolcalls.py; Hermes `<tool_call>{...}</tool_call>` by
default) marks function calls, the rest is the message. A tool call whose text does not parse, or
that names a tool the request did not declare, stays part of the message (the trainer still sees
exactly what the model wrote, and the agent can tell the model it was malformed).

Items come in the order reasoning, message, function calls, except that a message whose text
starts before the first tag comes first: a stream has announced it already (see textstream)."""

from __future__ import annotations

import re
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from rollgate.core.schemas import new_id
from rollgate.model_server.toolcalls import TOOL_CALL_FORMATS, ParsedCall, ToolCallFormat
from rollgate.model_server.wire import ResponsesRequest

# Reasoning formats (`model.reasoning_format`): the tags around the model's reasoning.
REASONING_FORMATS: dict[str, tuple[str, str] | None] = {"think": ("<think>", "</think>"), "none": None}
DEFAULT_REASONING = "think"


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


class OutputParser:
    """Generated text to output items, for one tool-call format and reasoning format."""

    def __init__(self, tool_format: ToolCallFormat | None = None, reasoning: str | None = None):
        self.tool_format = tool_format or TOOL_CALL_FORMATS["hermes"]
        name = reasoning or DEFAULT_REASONING
        if name not in REASONING_FORMATS:
            raise ValueError(
                f"model.reasoning_format: unknown reasoning format {name!r}; known: {sorted(REASONING_FORMATS)}"
            )
        self.reasoning = REASONING_FORMATS[name]
        self.think = None
        if self.reasoning is not None:
            start, end = (re.escape(t) for t in self.reasoning)
            self.think = re.compile(f"{start}(.*?)(?:{end}|$)", re.S)
        # where structured output starts: a stream holds plain text back from here
        self.tags = (*(self.reasoning[:1] if self.reasoning else ()), *self.tool_format.tags)

    def parse(self, text: str, declared: Collection[str] | None = None, *, calls: bool = True) -> list[dict[str, Any]]:
        """Output items (without token data). `declared`: the tools a call may name (None: any);
        a call to another name stays message text, as does every call when `calls` is off."""
        items: list[dict[str, Any]] = []
        rest = text
        if self.think is not None:
            reasoning = "".join(m.group(1) for m in self.think.finditer(text))
            rest = self.think.sub("", text)
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
        found = [
            c for c in (self.tool_format.find_calls(rest) if calls else []) if declared is None or c.name in declared
        ]
        starts = [i for i in (text.find(t) for t in self.tags) if i >= 0]
        message_first = bool(text[: min(starts, default=len(text))].strip())
        kept, pos = [], 0
        for c in found:
            kept.append(rest[pos : c.start])
            pos = c.end
        rest = ("".join(kept) + rest[pos:]).strip()
        if rest or not found:
            items.insert(0 if message_first else len(items), _message(rest))
        items.extend(_call_item(c) for c in found)
        return items


def parse_text(text: str, declared: Collection[str] | None = None) -> list[dict[str, Any]]:
    """Output items for generated text, in the default formats (Hermes calls, `<think>` reasoning)."""
    return _DEFAULT.parse(text, declared)


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


def _call_item(call: ParsedCall) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": new_id("fc"),
        "call_id": new_id("call"),
        "name": call.name,
        "arguments": call.arguments,
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
    previous_response_id: str | None = None,
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
        "previous_response_id": previous_response_id,
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


_DEFAULT = OutputParser()
TAGS = _DEFAULT.tags  # the default formats' tags (textstream's default)
