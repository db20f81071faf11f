"""Tool calls in a model's text: the formats a model writes them in, and `tool_choice`.

A `ToolCallFormat` is what vLLM calls a tool parser, plus the conventions a chat template without
tool support needs from it: how to list the declared tools in the system prompt, how to write an
earlier turn's calls and the tools' results back into plain messages, and the exact text a
constrained call is decoded as (`prefix` + one JSON object matching `call_schema` + `suffix`).
Adding a format is one subclass registered in `TOOL_CALL_FORMATS`. Both token backends (local,
vllm) get their text parsed here, so they agree on what is a call.

`tool_choice` (the same semantics on Responses, Chat Completions and Messages):
- "auto": the model decides; calls are parsed from its text;
- "none": nothing is parsed as a call (the tools stay in the prompt, so an episode's prompt does
  not change with its tool_choice and token-in/token-out stays exact);
- "required": the output is one call to one of the declared tools, by constrained decoding;
- a named function: one call to that function with arguments valid for its schema.
A call naming a tool that was not declared is never a function call: it stays message text."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from rollgate.core.errors import BadRequest
from rollgate.model_server.structured import JsonFormat

COMPONENT = "model"
ACCEPTED = '"auto", "none", "required" or {"type": "function", "name": <a declared tool>}'

# One encoder, built once: json.dumps with options builds a new one per call (a few us each).
_ARGS_JSON = json.JSONEncoder(ensure_ascii=False)


@dataclass(frozen=True)
class ToolChoice:
    mode: str  # "auto" | "none" | "required" | "function"
    name: str | None = None  # the function, for mode "function"

    @property
    def forced(self) -> bool:
        return self.mode in ("required", "function")


def _bad(why: str) -> BadRequest:
    return BadRequest(f"tool_choice: {why}; accepted: {ACCEPTED}", component=COMPONENT, field="tool_choice")


def parse_tool_choice(raw: Any, declared: list[str]) -> ToolChoice:
    """A Responses request's `tool_choice` (the dialects convert theirs to it), checked against
    the declared tools."""
    if raw is None or raw == "auto":
        return ToolChoice("auto")
    if raw == "none":
        return ToolChoice("none")
    if raw == "required":
        if not declared:
            raise _bad('"required" needs at least one tool in `tools`')
        return ToolChoice("required")
    if isinstance(raw, dict) and raw.get("type") == "function":
        name = raw.get("name")
        if not isinstance(name, str) or name not in declared:
            raise _bad(f"names function {name!r}, which is not declared in `tools` (declared: {declared})")
        return ToolChoice("function", name)
    raise _bad(f"unsupported value {raw!r}")


@dataclass(frozen=True, eq=False)
class ToolCallConstraint:
    """What a forced tool_choice decodes: `prefix_ids`, then one JSON document of `body`, then
    `suffix_ids` and the end of turn. The forced ids are the format's own text, tokenized."""

    body: JsonFormat
    prefix_ids: tuple[int, ...]
    suffix_ids: tuple[int, ...]

    @property
    def key(self) -> str:
        return f"{self.prefix_ids}|{self.body.key}|{self.suffix_ids}"


@dataclass(frozen=True)
class ParsedCall:
    start: int  # where its text starts and ends in the generation
    end: int
    name: str
    arguments: str  # JSON text


class ToolCallFormat:
    """A tool-call format (see the module doc). Subclasses set the class attributes and may
    override any method."""

    name = ""
    tags: tuple[str, ...] = ()  # text that starts a call: a stream holds plain text back from here
    prefix = ""  # a constrained call: prefix + JSON object + suffix
    suffix = ""
    result_open, result_close = "", ""

    def find_calls(self, text: str) -> list[ParsedCall]:
        """The well-formed calls in `text`, in order; malformed ones are left out (they stay text)."""
        raise NotImplementedError

    def call_object(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "arguments": arguments}

    def call_schema(self, tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The JSON schema of one call to any of `tools` (template schemas: name, parameters)."""
        options = [
            {
                "type": "object",
                "properties": {"name": {"const": t["name"]}, "arguments": t["parameters"]},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
            for t in tools
        ]
        return options[0] if len(options) == 1 else {"anyOf": options}

    def system_prompt(self, tools: list[dict[str, Any]]) -> str:
        raise NotImplementedError

    def call_text(self, name: str, arguments: Any) -> str:
        args = arguments if not isinstance(arguments, str) else _loads_or(arguments)
        return self.prefix + _ARGS_JSON.encode(self.call_object(name, args)) + self.suffix

    def result_text(self, output: str) -> str:
        return self.result_open + output + self.result_close


def _loads_or(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


class HermesFormat(ToolCallFormat):
    """Hermes / Qwen: `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, tool results
    as `<tool_response>` blocks in a user turn."""

    name = "hermes"
    tags = ("<tool_call>",)
    prefix = "<tool_call>\n"
    suffix = "\n</tool_call>"
    result_open, result_close = "<tool_response>\n", "\n</tool_response>"
    _CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)

    def find_calls(self, text: str) -> list[ParsedCall]:
        calls = []
        for m in self._CALL.finditer(text):
            parsed = _name_and_arguments(m.group(1), "arguments")
            if parsed is not None:
                calls.append(ParsedCall(m.start(), m.end(), *parsed))
        return calls

    def system_prompt(self, tools: list[dict[str, Any]]) -> str:
        listed = "\n".join(_ARGS_JSON.encode({"type": "function", "function": t}) for t in tools)
        return (
            "# Tools\n\nYou can call the functions listed between <tools> and </tools> to help with the "
            f"request:\n<tools>\n{listed}\n</tools>\n\nTo call a function, reply with a JSON object holding "
            "its name and arguments between <tool_call> and </tool_call>, once per call:\n"
            '<tool_call>\n{"name": <function name>, "arguments": <arguments as a JSON object>}\n</tool_call>'
        )


class Llama3JsonFormat(ToolCallFormat):
    """Llama 3.x JSON tool calls: the whole reply is `{"name": ..., "parameters": {...}}` (several
    calls separated by `;`); results come back in `ipython` turns, which a ChatML template writes
    as a user turn here."""

    name = "llama3_json"
    tags = ('{"name"',)
    prefix = ""
    suffix = ""

    def call_object(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "parameters": arguments}

    def call_schema(self, tools: list[dict[str, Any]]) -> dict[str, Any]:
        options = [
            {
                "type": "object",
                "properties": {"name": {"const": t["name"]}, "parameters": t["parameters"]},
                "required": ["name", "parameters"],
                "additionalProperties": False,
            }
            for t in tools
        ]
        return options[0] if len(options) == 1 else {"anyOf": options}

    def find_calls(self, text: str) -> list[ParsedCall]:
        start = len(text) - len(text.lstrip())
        if not text.startswith('{"name"', start):  # only a reply that is calls, as Llama writes them
            return []
        calls, pos = [], start
        decoder = json.JSONDecoder()
        while pos < len(text):
            try:
                obj, end = decoder.raw_decode(text, pos)
            except ValueError:
                return []
            parsed = _name_and_arguments(obj, "parameters")
            if parsed is None:
                return []
            rest = text[end:].lstrip()
            rest = rest[1:].lstrip() if rest.startswith(";") else rest  # the separator goes with the call
            if rest and not rest.startswith("{"):
                return []  # text after the calls: not a calls-only reply
            calls.append(ParsedCall(pos, len(text) - len(rest), *parsed))
            pos = len(text) - len(rest)
        return calls

    def system_prompt(self, tools: list[dict[str, Any]]) -> str:
        listed = "\n\n".join(_ARGS_JSON.encode({"type": "function", "function": t}) for t in tools)
        return (
            "You can call functions. To call one, reply with only a JSON object of the form "
            '{"name": <function name>, "parameters": <arguments as a JSON object>}.\n\n'
            f"The functions:\n\n{listed}"
        )


def _name_and_arguments(body: Any, key: str) -> tuple[str, str] | None:
    if isinstance(body, str):
        try:
            body = json.loads(body.strip())
        except ValueError:
            return None
    if not isinstance(body, dict) or not isinstance(body.get("name"), str) or not body["name"]:
        return None
    args = body.get(key, {})
    if isinstance(args, str):
        try:
            json.loads(args)
        except ValueError:
            return None
        return body["name"], args
    return body["name"], _ARGS_JSON.encode(args)


def constraint_for(
    fmt: ToolCallFormat, tools: list[dict[str, Any]], choice: ToolChoice, encode: Any
) -> ToolCallConstraint:
    """The constrained decoding of a forced `choice` over the declared `tools` (template schemas);
    `encode`: text to token ids with the model's tokenizer."""
    allowed = [t for t in tools if choice.mode == "required" or t["name"] == choice.name]
    where = "tools" if len(allowed) > 1 else f"tools[{[t['name'] for t in tools].index(allowed[0]['name'])}]"
    body = JsonFormat("json_schema", fmt.call_schema(allowed), "tool_choice", f"{where}.parameters")
    return ToolCallConstraint(body, tuple(encode(fmt.prefix)), tuple(encode(fmt.suffix)))


TOOL_CALL_FORMATS: dict[str, ToolCallFormat] = {f.name: f for f in (HermesFormat(), Llama3JsonFormat())}


def tool_call_format(name: str, *, field: str = "model.tool_call_format") -> ToolCallFormat:
    found = TOOL_CALL_FORMATS.get(name)
    if found is None:
        raise ValueError(f"{field}: unknown tool-call format {name!r}; known: {sorted(TOOL_CALL_FORMATS)}")
    return found
