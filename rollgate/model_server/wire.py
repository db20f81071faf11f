"""Wire types of the Responses API as this server accepts them. Unknown request fields (store,
reasoning, text, ...) are accepted and ignored, as OpenAI-compatible servers do; the fields we
use are validated, and every error names the offending field (e.g. `input[2].content`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rollgate.core.errors import BadRequest, field_error
from rollgate.core.schemas import MAX_JSON_INT, JsonInt

COMPONENT = "model"
# Requests are validated strictly: a JSON `true` is not the integer 1, nor "3" a number, exactly
# as the published JSON schemas say (pydantic's lax mode would take both).
STRICT = True


TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids")


def _document_token_fields(schema: dict[str, Any]) -> None:
    # checked by _check_token_fields, not by the model: published for OpenAPI all the same
    ids = {"anyOf": [{"type": "array", "items": {"type": "integer", "minimum": 0}}, {"type": "null"}]}
    schema.setdefault("properties", {}).update({name: ids for name in TOKEN_FIELDS})


class _Item(BaseModel):
    # Output items echoed back carry extra fields (ids, status, token data): keep them.
    model_config = ConfigDict(extra="allow", json_schema_extra=_document_token_fields)


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["input_text", "output_text", "text", "refusal", "summary_text", "reasoning_text"]
    text: str = ""
    refusal: str | None = None


class MessageItem(_Item):
    type: Literal["message"] = "message"
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text or (p.refusal or "") for p in self.content)


class FunctionCallItem(_Item):
    type: Literal["function_call"]
    name: str = Field(min_length=1)
    arguments: str
    call_id: str = ""


class FunctionCallOutputItem(_Item):
    type: Literal["function_call_output"]
    call_id: str = ""
    output: str | list[ContentPart]

    def text(self) -> str:
        if isinstance(self.output, str):
            return self.output
        return "".join(p.text for p in self.output)


class ReasoningItem(_Item):
    type: Literal["reasoning"]
    summary: list[ContentPart] = Field(default_factory=list)
    content: list[ContentPart] | None = None

    def text(self) -> str:
        parts = self.content if self.content else self.summary
        return "".join(p.text for p in parts)


InputItem = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem
ITEM_TYPES: dict[str, type[BaseModel]] = {
    "message": MessageItem,
    "function_call": FunctionCallItem,
    "function_call_output": FunctionCallOutputItem,
    "reasoning": ReasoningItem,
}


class FunctionTool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    def schema_for_template(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out["parameters"] = self.parameters or {"type": "object", "properties": {}}
        return out


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1)
    input: str | list[Any]  # items are checked one by one in parse_items, for precise field names
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Any = "auto"
    parallel_tool_calls: bool = True
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_output_tokens: JsonInt | None = Field(default=None, gt=0)
    metadata: dict[str, str] | None = None
    stream: bool = False
    # extension (not in OpenAI's API): a sampling seed for reproducible rollouts
    seed: JsonInt | None = None

    @field_validator("input")
    @classmethod
    def _non_empty(cls, v):
        if isinstance(v, list) and not v:
            raise ValueError("input must hold at least one item")
        return v


# pydantic names union members in error locations: not fields of the request
_UNION_TAGS = frozenset({*ITEM_TYPES, "str", "list[ContentPart]"})


def _field_error(exc: ValidationError, prefix: str = "") -> BadRequest:
    # With unions (a string or a list of parts) the deepest error is the informative one.
    return field_error(exc, component=COMPONENT, prefix=prefix, skip=_UNION_TAGS, indexed=True, deepest=True)


def parse_request(body: Any) -> ResponsesRequest:
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object", component=COMPONENT, field="body")
    try:
        return ResponsesRequest.model_validate(body, strict=STRICT)
    except ValidationError as exc:
        raise _field_error(exc) from None


def parse_items(raw: str | list[Any]) -> list[InputItem]:
    """The request's `input` as typed items (a bare string is one user message)."""
    if isinstance(raw, str):
        return [MessageItem(role="user", content=raw)]
    items: list[InputItem] = []
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise BadRequest(f"{where}: an item must be an object", component=COMPONENT, field=where)
        kind = item.get("type", "message" if "role" in item else None)
        model = ITEM_TYPES.get(kind) if isinstance(kind, str) else None
        if model is None:
            raise BadRequest(
                f"{where}.type: unsupported item type {kind!r}; expected one of {sorted(ITEM_TYPES)}",
                component=COMPONENT,
                field=f"{where}.type",
            )
        try:
            parsed = model.model_validate({**item, "type": kind}, strict=STRICT)
        except ValidationError as exc:
            raise _field_error(exc, where) from None
        _check_token_fields(item, where)
        items.append(parsed)  # type: ignore[arg-type]
    return items


def _integral(t: Any) -> bool:
    return type(t) is float and t.is_integer() and 0 <= t <= MAX_JSON_INT


def _check_token_fields(item: dict[str, Any], where: str) -> None:
    for name in TOKEN_FIELDS:
        ids = item.get(name)
        if ids is None:
            continue
        if isinstance(ids, list) and all(type(t) is int and 0 <= t <= MAX_JSON_INT for t in ids):
            continue
        if isinstance(ids, list) and all((type(t) is int and 0 <= t <= MAX_JSON_INT) or _integral(t) for t in ids):
            item[name] = [int(t) for t in ids]  # 3.0 is an integer in JSON
        else:
            raise BadRequest(
                f"{where}.{name}: must be a list of non-negative integer token ids",
                component=COMPONENT,
                field=f"{where}.{name}",
            )
