"""Tool-call comparison: the Responses `function_call` items an agent emitted vs expected calls."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from rollgate.verifiers.state import compare_state


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] | None  # None: the model sent arguments that are not a JSON object


@dataclass
class ToolCallComparison:
    expected: int
    matched: int
    missing: list[ToolCall] = field(default_factory=list)
    unexpected: list[ToolCall] = field(default_factory=list)

    @property
    def score(self) -> float:
        """Fraction of expected calls matched (1.0 when none were expected and none were made)."""
        if self.expected == 0:
            return 0.0 if self.unexpected else 1.0
        return self.matched / self.expected

    @property
    def exact(self) -> bool:
        return not self.missing and not self.unexpected


def _parse_args(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None
    return None


def function_calls(items: list[dict[str, Any]]) -> list[ToolCall]:
    """The function calls of a Responses transcript or output list, in order."""
    return [
        ToolCall(str(it.get("name", "")), _parse_args(it.get("arguments")))
        for it in items
        if isinstance(it, dict) and it.get("type") == "function_call"
    ]


def _as_call(spec: ToolCall | dict[str, Any]) -> ToolCall:
    if isinstance(spec, ToolCall):
        return spec
    return ToolCall(str(spec["name"]), _parse_args(spec.get("arguments", {})))


def _matches(expected: ToolCall, actual: ToolCall, args: Literal["exact", "subset"]) -> bool:
    if expected.name != actual.name or actual.arguments is None:
        return False
    want = expected.arguments or {}
    if args == "exact" and set(want) != set(actual.arguments):
        return False
    return not compare_state(want, actual.arguments, list_mode="exact" if args == "exact" else "subset")


def compare_tool_calls(
    actual: list[dict[str, Any]] | list[ToolCall],
    expected: list[dict[str, Any]] | list[ToolCall],
    *,
    ordered: bool = False,
    args: Literal["exact", "subset"] = "exact",
) -> ToolCallComparison:
    """Match expected calls against actual ones. `ordered`: expected calls must appear in order
    (other calls may sit between them). `args="subset"`: extra actual arguments are allowed."""
    got: list[ToolCall] = (
        list(actual)
        if all(isinstance(c, ToolCall) for c in actual)  # type: ignore[arg-type]
        else function_calls(actual)
    )  # type: ignore[arg-type]
    want = [_as_call(e) for e in expected]
    used: set[int] = set()
    missing: list[ToolCall] = []
    cursor = 0
    for e in want:
        start = cursor if ordered else 0
        hit = next((j for j in range(start, len(got)) if j not in used and _matches(e, got[j], args)), None)
        if hit is None:
            missing.append(e)
            continue
        used.add(hit)
        cursor = hit + 1
    unexpected = [c for j, c in enumerate(got) if j not in used]
    return ToolCallComparison(
        expected=len(want), matched=len(want) - len(missing), missing=missing, unexpected=unexpected
    )
