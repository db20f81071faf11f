"""Fast JSON in one place (orjson), so hot paths never pay for the stdlib encoder."""

from __future__ import annotations

from typing import Any

import orjson

JSONDecodeError = orjson.JSONDecodeError


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)


def dumps_str(obj: Any) -> str:
    return dumps(obj).decode()


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)


# How deep a request's JSON may nest. Real requests nest under ten levels; orjson refuses to
# write past 254 (a deep row would fail later, when it is stored or sent on), and a deep value
# costs every recursive reader of it (pydantic, templates) its stack.
MAX_DEPTH = 64


def too_deep(value: Any, raw: bytes | str | None = None, *, max_depth: int = MAX_DEPTH) -> str | None:
    """The path (e.g. `tasks[0].row`) where `value` nests deeper than `max_depth`, else None.

    `raw`, the JSON it was parsed from, makes the common case free: a body with no more than
    `max_depth` brackets in all cannot nest deeper (a C-speed count; brackets in strings only
    make the bound looser)."""
    if isinstance(raw, str):
        if raw.count("[") + raw.count("{") <= max_depth:
            return None
    elif raw is not None and raw.count(b"[") + raw.count(b"{") <= max_depth:
        return None
    if type(value) is not dict and type(value) is not list:
        return None
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if len(path) >= max_depth:
            return _path(path)
        if type(node) is dict:
            for key, child in node.items():
                if type(child) is dict or type(child) is list:
                    stack.append((child, (*path, key)))
        else:
            for i, child in enumerate(node):
                if type(child) is dict or type(child) is list:
                    stack.append((child, (*path, i)))
    return None


def _path(path: tuple[str | int, ...]) -> str:
    # the first few steps name the field; the rest is the same level again and again
    out = ""
    for step in path[:4]:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out or "body"
