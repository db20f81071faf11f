"""A task row's `responses_create_params`, checked wherever a TaskRow is validated (parse_row at
every edge, a trainer's rows, `rollgate tasks`).

The agent sends these fields to the model server on every turn of every sample: a row whose
`input` holds a bare number, or whose `tools` is a string, would fail there (or in the agent)
once per sample, long after the job was accepted. This is the model server's contract for the
fields a row may carry (rollgate.model_server.wire holds the full one; core cannot import it),
checked once, so such a row is a 400 naming the field at submit."""

from __future__ import annotations

from typing import Any

ROLES = ("system", "developer", "user", "assistant")
PART_TYPES = ("input_text", "output_text", "text", "refusal", "summary_text", "reasoning_text")
TOOL_CHOICES = ("auto", "none", "required")
MAX_OUTPUT_TOKENS = 1_000_000  # as a job's sampling override (SamplingOverrides)
MAX_JSON_INT = 2**53 - 1  # as rollgate.core.schemas (which imports this module)


class ParamError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def check_params(params: dict[str, Any]) -> None:
    """Raise ParamError naming the first bad field (relative to responses_create_params)."""
    _input(params.get("input"))
    if params.get("tools") is not None:
        _tools(params["tools"])
    for name, kind in (("instructions", str), ("model", str), ("parallel_tool_calls", bool), ("stream", bool)):
        value = params.get(name)
        if value is not None and type(value) is not kind:
            raise ParamError(name, f"must be a {'string' if kind is str else 'boolean'}")
    choice = params.get("tool_choice")
    if choice is not None and not (choice in TOOL_CHOICES or isinstance(choice, dict)):
        raise ParamError("tool_choice", f"must be one of {', '.join(TOOL_CHOICES)} or an object")
    _number(params, "temperature", low=0.0, high=2.0)
    _number(params, "top_p", low=0.0, high=1.0, low_open=True)
    _integer(params, "max_output_tokens", low=1, high=MAX_OUTPUT_TOKENS)
    _integer(params, "seed", low=-MAX_JSON_INT, high=MAX_JSON_INT)
    meta = params.get("metadata")
    if meta is not None and not (isinstance(meta, dict) and all(type(v) is str for v in meta.values())):
        raise ParamError("metadata", "must be an object of strings")


def _input(value: Any) -> None:
    if isinstance(value, str):
        return
    if not isinstance(value, list):
        raise ParamError("input", "must be a string or a list of items")
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise ParamError(where, "an item must be an object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            if item.get("role") not in ROLES:
                raise ParamError(f"{where}.role", f"must be one of {', '.join(ROLES)}")
            _content(item.get("content"), f"{where}.content")
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or not item["name"]:
                raise ParamError(f"{where}.name", "must be a non-empty string")
            if not isinstance(item.get("arguments"), str):
                raise ParamError(f"{where}.arguments", "must be a string (JSON-encoded arguments)")
        elif kind == "function_call_output":
            _content(item.get("output"), f"{where}.output")
        elif kind != "reasoning":
            raise ParamError(
                f"{where}.type",
                f"unsupported item type {kind!r}; expected one of function_call, function_call_output, "
                "message, reasoning",
            )


def _content(value: Any, where: str) -> None:
    if isinstance(value, str):
        return
    if not isinstance(value, list):
        raise ParamError(where, "must be a string or a list of content parts")
    for j, part in enumerate(value):
        if not isinstance(part, dict) or part.get("type") not in PART_TYPES:
            raise ParamError(f"{where}[{j}]", f"a content part is an object with type one of {', '.join(PART_TYPES)}")
        if not isinstance(part.get("text", ""), str):
            raise ParamError(f"{where}[{j}].text", "must be a string")


def _tools(value: Any) -> None:
    if not isinstance(value, list):
        raise ParamError("tools", "must be a list of tools (OpenAI function format)")
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise ParamError(where, "a tool must be an object")
        if tool.get("type", "function") != "function":
            raise ParamError(f"{where}.type", "must be 'function'")
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise ParamError(f"{where}.name", "must be a non-empty string")
        if tool.get("parameters") is not None and not isinstance(tool["parameters"], dict):
            raise ParamError(f"{where}.parameters", "must be a JSON schema object")
        if tool.get("description") is not None and not isinstance(tool["description"], str):
            raise ParamError(f"{where}.description", "must be a string")


def _number(params: dict[str, Any], name: str, *, low: float, high: float, low_open: bool = False) -> None:
    value = params.get(name)
    if value is None:
        return
    if type(value) not in (int, float) or value > high or value < low or (low_open and value == low):
        raise ParamError(name, f"must be a number in {'(' if low_open else '['}{low:g}, {high:g}]")


def _integer(params: dict[str, Any], name: str, *, low: int, high: int) -> None:
    value = params.get(name)
    if value is None:
        return
    if type(value) is float and value.is_integer():
        value = int(value)  # 3.0 is an integer in JSON
    if type(value) is not int or not low <= value <= high:
        raise ParamError(name, f"must be an integer in [{low}, {high}]")


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


_PART = {
    "type": "object",
    "required": ["type"],
    "properties": {"type": {"enum": list(PART_TYPES)}, "text": {"type": "string"}},
}
_CONTENT = {"anyOf": [{"type": "string"}, {"type": "array", "items": _PART}]}
_ITEM = {
    "anyOf": [
        {
            "type": "object",
            "required": ["role", "content"],
            "properties": {"type": {"const": "message"}, "role": {"enum": list(ROLES)}, "content": _CONTENT},
        },
        {
            "type": "object",
            "required": ["type", "name", "arguments"],
            "properties": {
                "type": {"const": "function_call"},
                "name": {"type": "string", "minLength": 1},
                "arguments": {"type": "string"},
            },
        },
        {
            "type": "object",
            "required": ["type", "output"],
            "properties": {"type": {"const": "function_call_output"}, "output": _CONTENT},
        },
        {"type": "object", "required": ["type"], "properties": {"type": {"const": "reasoning"}}},
    ]
}
_TOOL = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "type": {"const": "function"},
        "name": {"type": "string", "minLength": 1},
        "parameters": _nullable({"type": "object"}),
        "description": _nullable({"type": "string"}),
    },
}

# What check_params enforces, for the JSON schema (OpenAPI) of every route that takes a row.
PARAMS_SCHEMA: dict[str, Any] = {
    "required": ["input"],
    "properties": {
        "input": {"anyOf": [{"type": "string"}, {"type": "array", "items": _ITEM}]},
        "tools": _nullable({"type": "array", "items": _TOOL}),
        "instructions": _nullable({"type": "string"}),
        "model": _nullable({"type": "string"}),
        "parallel_tool_calls": _nullable({"type": "boolean"}),
        "stream": _nullable({"type": "boolean"}),
        "tool_choice": {"anyOf": [{"enum": list(TOOL_CHOICES)}, {"type": "object"}, {"type": "null"}]},
        "temperature": _nullable({"type": "number", "minimum": 0, "maximum": 2}),
        "top_p": _nullable({"type": "number", "exclusiveMinimum": 0, "maximum": 1}),
        "max_output_tokens": _nullable({"type": "integer", "minimum": 1, "maximum": MAX_OUTPUT_TOKENS}),
        "seed": _nullable({"type": "integer", "minimum": -MAX_JSON_INT, "maximum": MAX_JSON_INT}),
        "metadata": _nullable({"type": "object", "additionalProperties": {"type": "string"}}),
    },
}
