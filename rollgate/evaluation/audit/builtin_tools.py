"""The shipped probes that play with tools (docs/audit.md): the same call over and over, boundary
and wrong-typed arguments for each declared parameter, a tool that does not exist, and stalling to
the turn budget. None of them answers: an environment should pay them no more than the floor, and
a tool that fails on a bad argument must answer with an error the model can read, not end the
episode (a bad argument is the policy's mistake, not an environment failure)."""

from __future__ import annotations

from itertools import chain, zip_longest
from typing import Any, ClassVar

from rollgate.evaluation.audit.probes import IDK, Probe, ProbeContext

NO_SUCH_TOOL = "rollgate_audit_no_such_tool"
SPAM_CALLS = 5
LONG_ARG_CHARS = 10_000
HUGE = 10**18

# in-type extremes per JSON schema type, and values of another type
_BOUNDARY: dict[str, list[Any]] = {
    "string": ["", "x" * LONG_ARG_CHARS, " \n\t"],
    "integer": [0, -1, HUGE, -HUGE],
    "number": [0.0, -1.0, float(HUGE), 1e-300],
    "array": [[], ["x"] * 1000],
    "object": [{}],
}
_WRONG: dict[str, list[Any]] = {
    "string": [123456789, ["a"], None],
    "integer": ["not a number", 1.5, None],
    "number": ["not a number", [1], None],
    "boolean": ["yes", 2, None],
    "array": ["not a list", {"a": 1}, None],
    "object": ["not an object", [1], None],
}


def _kind(schema: dict[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind is None and isinstance(schema.get("anyOf") or schema.get("oneOf"), list):
        first = (schema.get("anyOf") or schema.get("oneOf"))[0]
        return _kind(first) if isinstance(first, dict) else None
    return kind if isinstance(kind, str) else None


def argument_calls(tools: list[dict[str, Any]], values: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Calls of each tool with one declared parameter at a time set to each of `values[its type]`
    (the others at their schema's minimum), interleaved across tools so that a short turn budget
    still reaches every tool."""
    from rollgate.model_server.scripted import example_value

    per_tool = []
    for tool in tools:
        params = tool.get("parameters") or {}
        base = example_value(params)
        base = base if isinstance(base, dict) else {}
        calls = []
        for name, schema in (params.get("properties") or {}).items():
            for value in values.get(_kind(schema if isinstance(schema, dict) else {}) or "", []):
                calls.append({"name": tool["name"], "arguments": {**base, name: value}})
        per_tool.append(calls)
    return [c for c in chain.from_iterable(zip_longest(*per_tool)) if c is not None]


class ToolSpam(Probe):
    name = "tool_spam"
    description = f"the first tool called {SPAM_CALLS} times with the same minimal arguments, then no answer"

    def applies(self, ctx):
        return None if ctx.tools else "the environment has no tools"

    def script(self, ctx):
        call = ctx.first_tool_call()
        return [{"call": call}] * min(SPAM_CALLS, max(1, ctx.max_turns - 1)) + [{"text": ctx.final(IDK)}]


class _Arguments(Probe):
    values: ClassVar[dict[str, list[Any]]] = {}

    def calls(self, ctx: ProbeContext) -> list[dict[str, Any]]:
        return argument_calls(ctx.tools, self.values)

    def applies(self, ctx):
        if not ctx.tools:
            return "the environment has no tools"
        return None if self.calls(ctx) else "no tool declares a parameter of a type this probe varies"

    def script(self, ctx):
        calls = self.calls(ctx)[: max(1, ctx.max_turns - 1)]
        return [{"call": c} for c in calls] + [{"text": ctx.final(IDK)}]


class BoundaryArgs(_Arguments):
    name = "tool_boundary_args"
    description = (
        "each tool called with each declared parameter at a boundary (empty and "
        f"{LONG_ARG_CHARS // 1000}k-character strings, 0, -1, +-10**18, empty and long lists), then no answer"
    )
    values = _BOUNDARY


class WrongTypeArgs(_Arguments):
    name = "tool_wrong_types"
    description = "each tool called with each declared parameter of a wrong type (and null), then no answer"
    values = _WRONG


class UnknownTool(Probe):
    name = "unknown_tool"
    description = "calls to a tool that does not exist, then no answer"

    def script(self, ctx):
        call = {"name": NO_SUCH_TOOL, "arguments": {"x": 1}}
        return [{"call": call}] * 2 + [{"text": ctx.final(IDK)}]


class Stall(Probe):
    name = "stall"
    description = "never answers: calls a tool until the turn budget ends"

    def script(self, ctx):
        call = ctx.first_tool_call() or {"name": NO_SUCH_TOOL, "arguments": {}}
        return [{"call": call}]  # the last turn repeats: the episode runs to max_turns
