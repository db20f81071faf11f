"""State comparison: is the expected state a subset of the actual one, and if not, where not."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

ListMode = Literal["subset", "exact"]


@dataclass(frozen=True)
class Mismatch:
    path: str  # e.g. "events[0].attendees"
    reason: str
    expected: Any = None
    actual: Any = None

    def __str__(self) -> str:
        return f"{self.path or '<root>'}: {self.reason}"


def _scalar_equal(expected: Any, actual: Any) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return math.isclose(expected, actual, rel_tol=1e-9, abs_tol=1e-12)
    return expected == actual


def compare_state(expected: Any, actual: Any, *, list_mode: ListMode = "subset", path: str = "") -> list[Mismatch]:
    """Mismatches between `expected` and `actual`; an empty list means `expected` is contained.

    Dicts: every expected key must be present and match (extra actual keys are fine).
    Lists: "subset" -- each expected element matches a distinct actual element, in any order;
    "exact" -- same length and element-wise match. Numbers compare by value (3 == 3.0)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [Mismatch(path, f"expected an object, got {type(actual).__name__}", expected, actual)]
        out: list[Mismatch] = []
        for key, value in expected.items():
            sub = f"{path}.{key}" if path else str(key)
            if key not in actual:
                out.append(Mismatch(sub, "missing", value, None))
            else:
                out.extend(compare_state(value, actual[key], list_mode=list_mode, path=sub))
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return [Mismatch(path, f"expected a list, got {type(actual).__name__}", expected, actual)]
        if list_mode == "exact":
            if len(expected) != len(actual):
                return [Mismatch(path, f"expected {len(expected)} items, got {len(actual)}", expected, actual)]
            out = []
            for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
                out.extend(compare_state(e, a, list_mode=list_mode, path=f"{path}[{i}]"))
            return out
        used: set[int] = set()
        out = []
        for i, e in enumerate(expected):
            hit = next(
                (j for j, a in enumerate(actual) if j not in used and not compare_state(e, a, list_mode=list_mode)),
                None,
            )
            if hit is None:
                out.append(Mismatch(f"{path}[{i}]", "no matching item", e, None))
            else:
                used.add(hit)
        return out
    if not _scalar_equal(expected, actual):
        return [Mismatch(path, f"expected {expected!r}, got {actual!r}", expected, actual)]
    return []


def state_matches(expected: Any, actual: Any, **kwargs) -> bool:
    return not compare_state(expected, actual, **kwargs)
