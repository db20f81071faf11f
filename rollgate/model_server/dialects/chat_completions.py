"""OpenAI Chat Completions (`POST /v1/chat/completions`): plain and SSE, tools and tool calls, `n`,
`logprobs`, `stop`. Messages become Responses items (an assistant message with tool calls becomes
a message item plus function_call items, a tool message a function_call_output), and Choices
become chat choices. What this server cannot honour (top_logprobs, penalties, logit_bias, and
`response_format` on a backend without constrained decoding) is a 400 naming the field, never
silently ignored."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rollgate.core.errors import RollgateError
from rollgate.core.schemas import JsonInt, new_id
from rollgate.model_server.calls import MAX_N, Call, Choice
from rollgate.model_server.dialects import sse_data, token_fields, unsupported, validate
from rollgate.model_server.structured import JsonFormat, chat_format
from rollgate.model_server.textstream import PlainTextGate

log = logging.getLogger("rollgate.model_server.chat_completions")

API = "chat.completions"


class _Function(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(BaseModel):
    type: Literal["function"] = "function"
    function: _Function


class _CallFunction(BaseModel):
    name: str = Field(min_length=1)
    arguments: str


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = ""
    type: Literal["function"] = "function"
    function: _CallFunction


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None  # what vLLM and DeepSeek answer; echoed back by some clients

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "".join(p.text for p in self.content)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # user, store, parallel_tool_calls, ...: accepted, no effect
    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: Any = None
    n: JsonInt = Field(default=1, ge=1, le=MAX_N)
    logprobs: bool | None = None
    top_logprobs: JsonInt | None = Field(default=None, ge=0, le=20)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_tokens: JsonInt | None = Field(default=None, gt=0)
    max_completion_tokens: JsonInt | None = Field(default=None, gt=0)
    seed: JsonInt | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: dict[str, Any] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    metadata: dict[str, str] | None = None


def _items(messages: list[Message]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            items.append({"type": "function_call_output", "call_id": m.tool_call_id or "", "output": m.text()})
        elif m.role != "assistant":
            items.append({"type": "message", "role": m.role, "content": m.text()})
        else:
            if m.reasoning_content:
                items.append(
                    {
                        "type": "reasoning",
                        "summary": [],
                        "content": [{"type": "reasoning_text", "text": m.reasoning_content}],
                    }
                )
            if m.text() or not m.tool_calls:
                items.append({"type": "message", "role": "assistant", "content": m.text()})
            for tc in m.tool_calls or []:
                items.append(
                    {
                        "type": "function_call",
                        "name": tc.function.name,
                        "arguments": tc.function.arguments,
                        "call_id": tc.id,
                    }
                )
    return items


_NONE = {"type": "null"}


def refused(formats: bool, log_probs: bool) -> dict[str, dict[str, Any]]:
    """What `_check` leaves of each option it limits, as JSON schemas (published in OpenAPI by
    rollgate.model_server.api_docs): keep the two in step. `formats`: the backend honours
    `response_format` (a hosted API behind it, or constrained decoding here)."""
    off = {"enum": [0, None]}
    out: dict[str, dict[str, Any]] = {
        "top_logprobs": off,
        "presence_penalty": off,
        "frequency_penalty": off,
        "logit_bias": {"anyOf": [{"type": "object", "maxProperties": 0}, _NONE]},
        "stop": {
            "anyOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "maxItems": 4, "items": {"type": "string", "minLength": 1}},
                _NONE,
            ]
        },
    }
    if not formats:
        out["response_format"] = {"anyOf": [{"type": "object", "properties": {"type": {"const": "text"}}}, _NONE]}
    if not log_probs:
        out["logprobs"] = {"enum": [False, None]}
    return out


def _check(req: ChatRequest, service: Any) -> tuple[tuple[str, ...], JsonFormat | None]:
    """Refuse what would otherwise be ignored; the stop sequences and the output format (the
    service refuses a format the backend cannot enforce)."""
    if req.top_logprobs:
        raise unsupported("top_logprobs", "alternatives per token are not computed here; use 0 or leave it out")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name):
            raise unsupported(name, "penalties are not applied by this server; use 0 or leave it out")
    if req.logit_bias:
        raise unsupported("logit_bias", "logit bias is not applied by this server; leave it out")
    if req.logprobs and service.prompts is None:
        raise unsupported("logprobs", f"the {service.backend.name!r} backend has no token log-probs")
    stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if len(stops) > 4 or any(not s for s in stops):
        raise unsupported("stop", "at most 4 non-empty stop sequences")
    return tuple(stops), chat_format(req.response_format)


def _prepare(service: Any, body: Any, training: bool | None, session: str | None) -> tuple[ChatRequest, Call]:
    req: ChatRequest = validate(ChatRequest, body)
    stop, fmt = _check(req, service)
    responses_body: dict[str, Any] = {
        "model": req.model,
        "input": _items(req.messages),
        "store": False,
    }
    if req.tools:
        responses_body["tools"] = [{"type": "function", **t.function.model_dump(exclude_none=True)} for t in req.tools]
    if isinstance(req.tool_choice, str):
        responses_body["tool_choice"] = req.tool_choice
    elif isinstance(req.tool_choice, dict) and isinstance(req.tool_choice.get("function"), dict):
        responses_body["tool_choice"] = {"type": "function", "name": req.tool_choice["function"].get("name")}
    elif req.tool_choice is not None:
        raise unsupported(
            "tool_choice",
            'accepted: "auto", "none", "required" or {"type": "function", "function": {"name": <a declared tool>}}',
        )
    max_tokens = req.max_completion_tokens or req.max_tokens
    for key, value in (
        ("temperature", req.temperature),
        ("top_p", req.top_p),
        ("max_output_tokens", max_tokens),
        ("seed", req.seed),
        ("metadata", req.metadata),
    ):
        if value is not None:
            responses_body[key] = value
    if req.response_format and service.forwards:
        fmt = req.response_format
        inner = fmt.get("json_schema") if isinstance(fmt.get("json_schema"), dict) else {}
        responses_body["text"] = {"format": {"type": fmt.get("type"), **inner}}
    call = service.prepare(
        responses_body, training=training, session=session, api=API, n=req.n, stop=stop, output_format=fmt
    )
    return req, call


def _finish_reason(choice: Choice) -> str:
    if choice.finish_reason == "length":
        return "length"
    return "tool_calls" if choice.calls else "stop"


def _tool_calls(choice: Choice) -> list[dict[str, Any]]:
    return [
        {"id": c["call_id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for c in choice.calls
    ]


def _logprobs(choice: Choice, tokenizer: Any) -> dict[str, Any] | None:
    gen = choice.gen
    if gen is None or gen.token_ids is None:
        return None
    ids, lps = list(gen.token_ids), list(gen.log_probs or [0.0] * len(gen.token_ids))
    if choice.finish_reason == "stop" and choice.stop_sequence is None and ids and ids[-1] == tokenizer.eos_token_id:
        ids, lps = ids[:-1], lps[:-1]  # the end-of-turn token is not part of the content
    content = []
    for tid, lp in zip(ids, lps, strict=True):
        token = tokenizer.decode([tid], skip_special_tokens=False)
        content.append({"token": token, "logprob": lp, "bytes": list(token.encode()), "top_logprobs": []})
    return {"content": content, "refusal": None}


def _choice_extras(req: ChatRequest, call: Call, choice: Choice, service: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"logprobs": _logprobs(choice, service.prompts.tokenizer) if req.logprobs else None}
    if call.training:
        out.update(token_fields(choice.gen))
    return out


def _usage(call: Call, choices: list[Choice]) -> dict[str, int]:
    first = choices[0].gen if choices else None
    prompt = len((first.prompt_ids if first else None) or call.prompt_ids or [])
    completion = sum(len(c.gen.token_ids or []) for c in choices if c.gen is not None)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def create(service: Any, body: Any, *, training: bool | None = None, session: str | None = None):
    req, call = await service.admission.run(body, _prepare, service, body, training, session)
    choices = await service.complete(call)
    out = []
    for i, choice in enumerate(choices):
        message: dict[str, Any] = {"role": "assistant", "content": choice.text or (None if choice.calls else "")}
        if choice.calls:
            message["tool_calls"] = _tool_calls(choice)
        if choice.reasoning:
            message["reasoning_content"] = choice.reasoning
        entry = {"index": i, "message": message, "finish_reason": _finish_reason(choice)}
        out.append(entry | _choice_extras(req, call, choice, service))
    return {
        "id": new_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": req.model,
        "choices": out,
        "usage": _usage(call, choices),
        "system_fingerprint": None,
    }


async def stream(
    service: Any, body: Any, *, training: bool | None = None, session: str | None = None
) -> AsyncIterator[bytes]:
    """SSE chunks; the request is validated and admitted before the first byte."""
    req, call = await service.admission.run(body, _prepare, service, body, training, session)
    pieces = service.complete_stream(call)
    return _chunks(service, req, call, pieces)


async def _chunks(service: Any, req: ChatRequest, call: Call, pieces: AsyncIterator[tuple[int, Any]]):
    base = {"id": new_id("chatcmpl"), "object": "chat.completion.chunk", "created": int(time.time())}
    base |= {"model": req.model, "system_fingerprint": None}

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        entry = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish} | extra
        return sse_data(base | {"choices": [entry]})

    for i in range(call.n):
        yield chunk(i, {"role": "assistant", "content": ""})
    gates = [PlainTextGate(call.tags) for _ in range(call.n)]
    done: list[Choice] = []
    try:
        async for i, piece in pieces:
            if isinstance(piece, str):
                if text := gates[i].feed(piece):
                    yield chunk(i, {"content": text})
                continue
            done.append(piece)
            delta: dict[str, Any] = {}
            sent = gates[i].sent
            if not piece.text.startswith(sent):  # cannot happen with parse_text; the reply stays whole
                log.error("streamed text is not a prefix of the final message text")
                sent = ""
            if rest := piece.text[len(sent) :]:
                delta["content"] = rest
            if piece.reasoning:
                delta["reasoning_content"] = piece.reasoning
            if piece.calls:
                delta["tool_calls"] = [dict(tc, index=k) for k, tc in enumerate(_tool_calls(piece))]
            if delta:
                yield chunk(i, delta)
            yield chunk(i, {}, _finish_reason(piece), **_choice_extras(req, call, piece, service))
    except RollgateError as exc:
        log.warning("chat stream failed: %s", exc)
        err = exc.body()["error"]
        yield sse_data({"error": {"message": exc.message, "type": err.get("kind"), "param": exc.field, "code": None}})
        return
    except Exception:
        log.exception("chat stream failed")
        yield sse_data({"error": {"message": "the model server failed while generating", "type": "internal"}})
        return
    finally:
        await pieces.aclose()  # type: ignore[attr-defined]
    if req.stream_options is not None and req.stream_options.include_usage:
        yield sse_data(base | {"choices": [], "usage": _usage(call, done)})
    yield b"data: [DONE]\n\n"
