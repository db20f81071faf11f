"""Declaring tools: `@tool` on an Environment method, and the spec (OpenAI schema, argument
validator, roles) derived from its signature once per class (rollgate.resources_servers.base)."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model


class ToolError(Exception):
    """An illegal action or bad argument: reported to the model as an error output, not a failure."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    params: type[BaseModel]
    method_name: str
    blocking: bool  # run in a worker thread (the tool blocks, e.g. runs a subprocess)
    is_async: bool
    roles: tuple[str, ...] = ()  # a multi-role environment: the roles that may call it (empty: all)

    def openai_schema(self) -> dict[str, Any]:
        schema = self.params.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        schema.setdefault("properties", {})
        schema["additionalProperties"] = False
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": schema,
            "strict": False,
        }


def tool(
    fn: Callable | None = None, *, name: str | None = None, blocking: bool = False, role: str | tuple[str, ...] = ()
):
    """Mark an Environment method as a tool. `blocking=True` runs it in a worker thread; `role`:
    the role (or roles) of a multi-role environment that may call it (default: every role)."""
    roles = (role,) if isinstance(role, str) else tuple(role)

    def mark(f: Callable) -> Callable:
        f.__rollgate_tool__ = {"name": name or f.__name__, "blocking": blocking, "roles": roles}  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark


def _doc_summary(f: Callable) -> str:
    doc = inspect.getdoc(f) or ""
    return doc.split("\n\n")[0].replace("\n", " ").strip()


def build_spec(cls: type, attr: str, f: Callable) -> ToolSpec:
    meta = f.__rollgate_tool__  # type: ignore[attr-defined]
    sig = inspect.signature(f)
    hints = typing.get_type_hints(f, include_extras=True)
    params = list(sig.parameters.values())
    if len(params) < 2 or params[0].name != "self" or params[1].name != "state":
        raise TypeError(f"{cls.__name__}.{attr}: a tool's signature is (self, state, <arguments>...)")
    fields: dict[str, Any] = {}
    for p in params[2:]:
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            raise TypeError(f"{cls.__name__}.{attr}: *args/**kwargs are not allowed in tools")
        if p.name not in hints:
            raise TypeError(f"{cls.__name__}.{attr}: argument {p.name!r} needs a type annotation")
        default = ... if p.default is p.empty else p.default
        fields[p.name] = (hints[p.name], default)
    model = create_model(f"{cls.__name__}_{attr}_args", __config__=ConfigDict(extra="forbid"), **fields)
    return ToolSpec(
        name=meta["name"],
        description=_doc_summary(f),
        params=model,
        method_name=attr,
        blocking=meta["blocking"],
        is_async=inspect.iscoroutinefunction(f),
        roles=meta.get("roles", ()),
    )
