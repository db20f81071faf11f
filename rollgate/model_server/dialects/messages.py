"""Anthropic Messages (`POST /v1/messages`): plain and SSE, tool use, stop sequences. Content blocks
become Responses items (text -> message, tool_use -> function_call, tool_result ->
function_call_output, thinking -> reasoning) and a Choice becomes one message whose content
blocks keep the order of the output items. `top_k` and images are refused with a 400 naming the
field: this server does not apply them. `output_config.format` (a JSON schema) is enforced by the
backend's constrained decoding, or refused where the backend has none."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rollgate.core.errors import RollgateError
from rollgate.core.schemas import JsonInt, new_id
from rollgate.model_server.calls import Call, Choice
from rollgate.model_server.dialects import sse_event, token_fields, unsupported, validate
from rollgate.model_server.structured import messages_format
from rollgate.model_server.textstream import PlainTextGate

log = logging.getLogger("rollgate.model_server.messages")

API = "messages"


class _Block(BaseModel):
    model_config = ConfigDict(extra="allow")  # cache_control, citations, ...: no effect here


class TextBlock(_Block):
    type: Literal["text"]
    text: str


class ToolUseBlock(_Block):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


class ToolResultBlock(_Block):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[TextBlock] | None = None
    is_error: bool = False

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "".join(b.text for b in self.content)


class ThinkingBlock(_Block):
    type: Literal["thinking"]
    thinking: str
    signature: str = ""


Block = Annotated[TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock, Field(discriminator="type")]
_TAGS = frozenset({"text", "tool_use", "tool_result", "thinking"})


class Message(BaseModel):
    role: Literal["user", "assistant"]
    content: str | Annotated[list[Block], Field(min_length=1)]  # as Anthropic: no empty block list


class Tool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["custom"] | None = None  # server tools (bash_..., web_search_...) run at Anthropic only
    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any]


class MessagesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # thinking, service_tier, ...: accepted, no effect
    model: str = Field(min_length=1)
    max_tokens: JsonInt = Field(gt=0)
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: dict[str, Any] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: JsonInt | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    metadata: dict[str, Any] | None = None
    seed: JsonInt | None = None  # extension (not in Anthropic's API), as on /v1/responses


def _items(req: MessagesRequest) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if req.system:
        text = req.system if isinstance(req.system, str) else "".join(b.text for b in req.system)
        items.append({"type": "message", "role": "system", "content": text})
    for m in req.messages:
        blocks = [TextBlock(type="text", text=m.content)] if isinstance(m.content, str) else m.content
        for b in blocks:
            if isinstance(b, TextBlock):
                items.append({"type": "message", "role": m.role, "content": b.text})
            elif isinstance(b, ToolUseBlock):
                args = json.dumps(b.input, ensure_ascii=False)
                items.append({"type": "function_call", "name": b.name, "arguments": args, "call_id": b.id})
            elif isinstance(b, ToolResultBlock):
                out = ("Error: " if b.is_error else "") + b.text()
                items.append({"type": "function_call_output", "call_id": b.tool_use_id, "output": out})
            else:
                part = {"type": "reasoning_text", "text": b.thinking}
                items.append({"type": "reasoning", "summary": [], "content": [part]})
    return items


def refused(formats: bool) -> dict[str, dict[str, Any]]:
    """What `_prepare` leaves of each option it refuses, as JSON schemas (published in OpenAPI by
    rollgate.model_server.api_docs): keep the two in step. `formats`: the backend honours
    `output_config.format` (a hosted API behind it, or constrained decoding here)."""
    out: dict[str, dict[str, Any]] = {
        "top_k": {"type": "null"},
        "stop_sequences": {"anyOf": [{"type": "array", "items": {"type": "string", "minLength": 1}}, {"type": "null"}]},
    }
    config: dict[str, Any] = {"type": "object"}
    if not formats:
        config["properties"] = {"format": {"type": "null"}}
    out["output_config"] = {"anyOf": [config, {"type": "null"}]}
    return out


def _prepare(service: Any, body: Any, training: bool | None, session: str | None) -> tuple[MessagesRequest, Call]:
    if isinstance(body, dict):  # name the block of an unsupported type (image, document) precisely
        for i, m in enumerate(body.get("messages") or []):
            for j, b in enumerate((m.get("content") if isinstance(m, dict) else None) or []):
                if isinstance(b, dict) and not (isinstance(b.get("type"), str) and b["type"] in _TAGS):
                    raise unsupported(
                        f"messages[{i}].content[{j}].type",
                        f"block type {b.get('type')!r} is not supported; expected one of {sorted(_TAGS)}",
                    )
    req: MessagesRequest = validate(MessagesRequest, body, _TAGS)
    if req.top_k is not None:
        raise unsupported("top_k", "top-k sampling is not applied by this server; leave it out")
    output_config = (req.model_extra or {}).get("output_config")
    if output_config is not None and not isinstance(output_config, dict):
        raise unsupported("output_config", "must be an object")
    fmt = messages_format((output_config or {}).get("format"))  # the service refuses what it cannot enforce
    stops = tuple(req.stop_sequences or ())
    if any(not s for s in stops):
        raise unsupported("stop_sequences", "stop sequences must be non-empty")
    responses_body: dict[str, Any] = {
        "model": req.model,
        "input": _items(req),
        "max_output_tokens": req.max_tokens,
        "store": False,
    }
    if req.tools:
        responses_body["tools"] = [
            {"type": "function", "name": t.name, "description": t.description, "parameters": t.input_schema}
            for t in req.tools
        ]
    if req.tool_choice is not None:
        responses_body["tool_choice"] = _tool_choice(req.tool_choice)
    if req.temperature is not None:
        responses_body["temperature"] = req.temperature
    if req.top_p is not None:
        responses_body["top_p"] = req.top_p
    if req.seed is not None:
        responses_body["seed"] = req.seed
    if fmt is not None and service.forwards:  # a hosted Responses API enforces it
        responses_body["text"] = {"format": {"type": fmt.kind, "name": "output", "schema": fmt.schema}}
    meta = {k: v for k, v in (req.metadata or {}).items() if isinstance(v, str)}
    if meta:
        responses_body["metadata"] = meta
    call = service.prepare(responses_body, training=training, session=session, api=API, stop=stops, output_format=fmt)
    return req, call


def _tool_choice(raw: dict[str, Any]) -> Any:
    """Messages' tool_choice as the Responses one (the service enforces it)."""
    kind = raw.get("type")
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    if kind == "tool":
        return {"type": "function", "name": raw.get("name")}
    raise unsupported(
        "tool_choice",
        f'unsupported type {kind!r}; accepted: {{"type": "auto"}}, {{"type": "any"}}, {{"type": "none"}} or '
        '{"type": "tool", "name": <a declared tool>}',
    )


def _stop_reason(choice: Choice) -> str:
    if choice.stop_sequence is not None:
        return "stop_sequence"
    if choice.finish_reason == "length":
        return "max_tokens"
    return "tool_use" if choice.calls else "end_turn"


def _blocks(choice: Choice) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for item in choice.items:
        if item["type"] == "reasoning":
            text = "".join(p.get("text", "") for p in item.get("content") or [])
            blocks.append({"type": "thinking", "thinking": text, "signature": ""})
        elif item["type"] == "message":
            text = "".join(p.get("text", "") for p in item.get("content") or [])
            if text or not choice.calls:
                blocks.append({"type": "text", "text": text})
        elif item["type"] == "function_call":
            try:
                args = json.loads(item["arguments"])
            except ValueError:
                args = {}
            blocks.append({"type": "tool_use", "id": item["call_id"], "name": item["name"], "input": args})
    return blocks


def _usage(call: Call, choice: Choice | None) -> dict[str, int]:
    gen = choice.gen if choice is not None else None
    return {
        "input_tokens": len((gen.prompt_ids if gen else None) or call.prompt_ids or []),
        "output_tokens": len((gen.token_ids if gen else None) or []),
    }


def _message(req: MessagesRequest, call: Call, choice: Choice | None, message_id: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": req.model,
        "content": _blocks(choice) if choice is not None else [],
        "stop_reason": _stop_reason(choice) if choice is not None else None,
        "stop_sequence": choice.stop_sequence if choice is not None else None,
        "usage": _usage(call, choice),
    }
    if call.training and choice is not None:
        out.update(token_fields(choice.gen))
    return out


async def create(service: Any, body: Any, *, training: bool | None = None, session: str | None = None):
    req, call = await service.admission.run(body, _prepare, service, body, training, session)
    [choice] = await service.complete(call)
    return _message(req, call, choice, new_id("msg"))


async def stream(
    service: Any, body: Any, *, training: bool | None = None, session: str | None = None
) -> AsyncIterator[bytes]:
    """SSE events; the request is validated and admitted before the first byte."""
    req, call = await service.admission.run(body, _prepare, service, body, training, session)
    return _events(req, call, service.complete_stream(call))


async def _events(req: MessagesRequest, call: Call, pieces: AsyncIterator[tuple[int, Any]]):
    message_id = new_id("msg")
    yield sse_event("message_start", {"type": "message_start", "message": _message(req, call, None, message_id)})
    gate = PlainTextGate(call.tags)
    index = 0  # next content block
    text_open = False
    try:
        async for _, piece in pieces:
            if isinstance(piece, str):
                text = gate.feed(piece)
                if text and not text_open:
                    block = {"type": "text", "text": ""}
                    yield sse_event(
                        "content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}
                    )
                    text_open, index = True, 1
                if text:
                    delta = {"type": "text_delta", "text": text}
                    yield sse_event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
                continue
            choice: Choice = piece
            blocks = _blocks(choice)
            if text_open:  # parse_text puts a message that started before any tag first
                first = blocks.pop(0) if blocks and blocks[0]["type"] == "text" else {"text": gate.sent}
                if rest := first["text"][len(gate.sent) :] if first["text"].startswith(gate.sent) else "":
                    delta = {"type": "text_delta", "text": rest}
                    yield sse_event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
                yield sse_event("content_block_stop", {"type": "content_block_stop", "index": 0})
            for block in blocks:
                for event in _block_events(index, block):
                    yield event
                index += 1
            final = _message(req, call, choice, message_id)
            delta = {"stop_reason": final["stop_reason"], "stop_sequence": final["stop_sequence"]}
            extra = token_fields(choice.gen) if call.training else {}
            yield sse_event("message_delta", {"type": "message_delta", "delta": delta, "usage": final["usage"]} | extra)
    except RollgateError as exc:
        log.warning("messages stream failed: %s", exc)
        yield sse_event("error", {"type": "error", "error": {"type": "invalid_request_error", "message": exc.message}})
        return
    except Exception:
        log.exception("messages stream failed")
        error = {"type": "api_error", "message": "the model server failed while generating"}
        yield sse_event("error", {"type": "error", "error": error})
        return
    finally:
        await pieces.aclose()  # type: ignore[attr-defined]
    yield sse_event("message_stop", {"type": "message_stop"})


def _block_events(index: int, block: dict[str, Any]) -> list[bytes]:
    if block["type"] == "text":
        start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
    elif block["type"] == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        delta = {"type": "thinking_delta", "thinking": block["thinking"]}
    else:
        start = dict(block, input={})
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}
    return [
        sse_event("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
        sse_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
        sse_event("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]
