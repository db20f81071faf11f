"""What the model routes accept and answer, for the OpenAPI documents of the model server and of
the gateway that proxies it.

The routes read raw JSON (rollgate.core.app's hot routes) and validate with the wire models
(rollgate.model_server.wire, dialects/). The published request schemas are those models' JSON
schemas, narrowed where the code checks more than the model does: the served model names, the
`input` items (checked one by one by `parse_items`), the `metadata` keys the service reads, and
the options a dialect refuses (its `refused` table). Response bodies are described by the models
below; they list the fields every answer has and allow more (OpenAI adds fields often)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rollgate.core.openapi import errors, inline_schema, json_content, link, semantic_checks
from rollgate.model_server import wire
from rollgate.model_server.backend import ConstrainedBackend
from rollgate.model_server.capture import SESSION_PATTERN
from rollgate.model_server.dialects import chat_completions, messages
from rollgate.model_server.prepare import FALSE, IGNORE_EOS_KEY, SEED_PATTERN, TRUE

SSE = "text/event-stream"
# one server-sent event (the data of each is the JSON of one event or chunk of the API)
SSE_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {"event": {"type": "string"}, "data": {"type": "string", "contentMediaType": "application/json"}},
}


@dataclass(frozen=True)
class ModelShape:
    """What the narrowed schemas depend on: the names served, and the backend's abilities."""

    names: tuple[str, ...]
    forwards: bool = False  # a hosted API behind: structured output is its business
    log_probs: bool = False  # a tokenizer here: Chat Completions `logprobs` can be answered
    formats: bool = False  # JSON output formats are honoured (forwarded, or constrained decoding here)

    @classmethod
    def of(cls, service: Any) -> ModelShape:
        formats = service.forwards or isinstance(service.backend, ConstrainedBackend)
        return cls(tuple(sorted(service.model_names)), service.forwards, service.prompts is not None, formats)

    @classmethod
    def from_settings(cls, settings: Any) -> ModelShape:
        """The gateway's view of the model pool it proxies (it holds no service)."""
        m = settings.model
        names = {m.served_name, *((m.upstream_model,) if m.upstream_model else ())}
        return cls(tuple(sorted(names)), m.backend == "openai", m.backend in ("local", "vllm"), m.backend != "scripted")


# --- response bodies ----------------------------------------------------------------------------


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ResponseObject(_Open):
    id: str
    object: Literal["response"]
    created_at: int
    model: str
    status: Literal["completed", "incomplete", "failed", "in_progress"]
    output: list[dict[str, Any]] = Field(description="output items; in training mode they carry token ids")
    usage: dict[str, Any] | None = None


class ModelCard(_Open):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(_Open):
    object: Literal["list"]
    data: list[ModelCard]


class CapturedChoice(BaseModel):
    generation_token_ids: list[int]
    generation_log_probs: list[float]
    finish_reason: str
    weight_version: str | None
    message: dict[str, Any] = Field(
        default_factory=dict, description="the assistant message it became: role, content, tool_calls"
    )


class CapturedCall(BaseModel):
    index: int
    api: str
    model: str
    created_at: float
    extends: int | None
    prompt_token_ids: list[int]
    choices: list[CapturedChoice]


class CaptureSession(BaseModel):
    session: str
    calls: list[CapturedCall]
    dropped_calls: int
    tokens: int


class ChatCompletion(_Open):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[dict[str, Any]]
    usage: dict[str, int]


class AnthropicMessage(_Open):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[dict[str, Any]]
    stop_reason: str | None
    usage: dict[str, Any]


# --- request bodies -----------------------------------------------------------------------------

_NULL = {"type": "null"}


def _ci(words: set[str]) -> str:
    """A pattern matching any of `words`, case-insensitively (the service lower-cases flags)."""
    alts = ("".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in w) for w in sorted(words))
    return "^(" + "|".join(alts) + ")$"


def metadata_schema(*, strings_only: bool = True) -> dict[str, Any]:
    """`metadata` as the service reads it: strings, two of its keys with a syntax. Messages
    drops values that are not strings (`strings_only=False`)."""

    def key(pattern: str) -> dict[str, Any]:
        text = {"type": "string", "pattern": pattern}
        return text if strings_only else {"anyOf": [text, {"not": {"type": "string"}}]}

    return _optional(
        {
            "type": "object",
            "additionalProperties": {"type": "string"} if strings_only else True,
            "properties": {"rollgate_seed": key(SEED_PATTERN), IGNORE_EOS_KEY: key(_ci(TRUE | FALSE))},
        }
    )


def _items_schema() -> dict[str, Any]:
    items = [inline_schema(model) for model in wire.ITEM_TYPES.values()]
    return {"type": "array", "minItems": 1, "items": {"anyOf": items}}


def _optional(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, _NULL]}


@functools.cache  # one per shape; the documents share it (nothing edits it later)
def responses_schema(shape: ModelShape) -> dict[str, Any]:
    s = inline_schema(wire.ResponsesRequest)
    p = s["properties"]
    p["model"] = {"type": "string", "enum": list(shape.names)}
    p["input"] = {"anyOf": [{"type": "string"}, _items_schema()]}
    p["metadata"] = metadata_schema()
    p["previous_response_id"] = _optional({"type": "string"})
    # structured.responses_format: `text` and `text.format` are objects; a backend without JSON
    # formats takes only the plain text one
    fmt: dict[str, Any] = {"type": "object"}
    if not shape.formats:
        fmt["properties"] = {"type": {"const": "text"}}
    p["text"] = _optional({"type": "object", "properties": {"format": _optional(fmt)}})
    return s


@functools.cache  # one per shape; the documents share it (nothing edits it later)
def chat_schema(shape: ModelShape) -> dict[str, Any]:
    s = inline_schema(chat_completions.ChatRequest)
    p = s["properties"]
    p["model"] = {"type": "string", "enum": list(shape.names)}
    p["metadata"] = metadata_schema()
    for name, schema in chat_completions.refused(shape.formats, shape.log_probs).items():
        p[name] = schema
    return s


@functools.cache  # one per shape; the documents share it (nothing edits it later)
def messages_schema(shape: ModelShape) -> dict[str, Any]:
    s = inline_schema(messages.MessagesRequest)
    p = s["properties"]
    p["model"] = {"type": "string", "enum": list(shape.names)}
    for name, schema in messages.refused(shape.formats).items():
        p[name] = schema
    p["metadata"] = metadata_schema(strings_only=False)
    return s


# --- routes -------------------------------------------------------------------------------------


def session_param(*, checked: bool) -> dict[str, Any]:
    """The capture session in the path; `checked`: the route refuses a malformed one (400)."""
    schema: dict[str, Any] = {"type": "string"}
    if checked:
        schema["pattern"] = SESSION_PATTERN
    return {"name": "session", "in": "path", "required": True, "description": "capture session", "schema": schema}


POST_SUMMARIES = {
    "/v1/responses": "OpenAI Responses API",
    "/v1/chat/completions": "OpenAI Chat Completions API",
    "/v1/messages": "Anthropic Messages API",
}
_POST = {
    "/v1/responses": (responses_schema, ResponseObject, "A response (SSE events with stream: true)"),
    "/v1/chat/completions": (chat_schema, ChatCompletion, "A chat completion (SSE chunks with stream: true)"),
    "/v1/messages": (messages_schema, AnthropicMessage, "A message (SSE events with stream: true)"),
}
_POST_ERRORS = (404, 503)  # 404: a model or previous_response_id not served; 503: the engine's queue is full


def post_docs(path: str, shape: ModelShape, *, capture: bool) -> dict[str, Any]:
    """`openapi_extra` and `responses` of a POST model route."""
    schema, model, what = _POST[path]
    extra: dict[str, Any] = {
        "requestBody": {"required": True, "content": {"application/json": {"schema": schema(shape)}}},
        # the model's context is the server's state, not the schema's: a bigger token budget is a 400
        # (every dialect's budget is checked as the Responses request it becomes)
        **semantic_checks(
            ("max_output_tokens", "at most the model's context (model.max_context_tokens)"),
            ("tool_choice", "names a declared tool; `required` needs tools; a forced call needs constrained decoding"),
        ),
    }
    if capture:
        extra["parameters"] = [session_param(checked=True)]
    ok = json_content(model, what)
    ok["content"][SSE] = {"schema": SSE_EVENT}
    if path == "/v1/responses" and not capture:
        ok["links"] = {"retrieve": link("/v1/responses/{response_id}", "get", response_id="$response.body#/id")}
    return {"openapi_extra": extra, "responses": {200: ok, **errors(*_POST_ERRORS)}}


def get_docs(path: str, *, capture: bool) -> dict[str, Any]:
    """`openapi_extra`, `responses` (and the response model) of a GET model route."""
    extra = {"parameters": [session_param(checked=False)]} if capture else None  # the session is not read
    if path == "/v1/models":
        return {"openapi_extra": extra, "response_model": ModelList, "responses": {}}
    return {"openapi_extra": extra, "response_model": ResponseObject, "responses": errors(404)}


CAPTURE_DOCS: dict[str, Any] = {
    "response_model": CaptureSession,
    "responses": errors(400, 404),
    "openapi_extra": {"parameters": [session_param(checked=True)]},
}
