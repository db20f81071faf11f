"""Tools whose schemas come from another server, not from a Python signature (the interop kinds:
MCP, NeMo Gym, OpenEnv). The server is asked when the environment is built, so the schemas belong
to the instance, and the arguments pass through whole for the server (or a JSON-schema check) to
judge."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import RootModel

from rollgate.resources_servers.base import ToolSpec


class PassThroughArguments(RootModel[dict[str, Any]]):
    """Arguments pass through whole; the external server's schema is the judge of them."""


@dataclass(frozen=True)
class SchemaToolSpec(ToolSpec):
    """A tool described by a JSON schema the external server published."""

    input_schema: dict[str, Any] = field(default_factory=dict)

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.input_schema,
            "strict": False,
        }


class PerInstance:
    """`tool_specs()` / `tool_schemas()`: on the class, none (the server is not asked before the
    environment is built); on an instance, the server's tools."""

    def __init__(self, build: Callable[[Any], Any]):
        self.build = build

    def __get__(self, obj, cls):
        if obj is None:
            return lambda: self.build(None)
        return lambda: self.build(obj)


def bind_tool(
    env: Any, attr: str, call: Callable[..., Any], name: str, description: str, schema: dict[str, Any]
) -> SchemaToolSpec:
    """A tool of `env` that forwards to `call(name, state, arguments)`: bound to the instance as
    `attr` (EnvRuntime calls tools by method name), its arguments passed through whole."""
    setattr(env, attr, functools.partial(call, name))
    return SchemaToolSpec(
        name=name,
        description=description,
        params=PassThroughArguments,
        method_name=attr,
        blocking=False,
        is_async=True,
        input_schema=schema,
    )
