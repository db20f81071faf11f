"""The `mcp` kind of configured environments: tools from an external MCP server, a verifier by name.

    envs:
      - name: notes
        kind: mcp
        command: ["python", "notes_server.py"]      # or url: "http://127.0.0.1:9000/mcp"
        verifier: "my_envs.notes:verify"            # verify(env, state, request) -> VerifyResult | float
        tool_timeout_s: 30

The verifier is a plain function (sync or async). It gets the environment (to read the server's
state with `await env.call_server(state, tool, args)`), the session state (`state.row`: the task
row's environment fields, copied at seed) and the VerifyRequest (the final answer and transcript).
A float is taken as the reward. Writing a subclass of MCPToolsEnvironment instead (docs/interop.md)
is the way to seed richer state.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rollgate.core.errors import BadRequest
from rollgate.core.schemas import TaskRow, VerifyRequest, VerifyResult
from rollgate.resources_servers.external import configured_spec, parse_options
from rollgate.resources_servers.interop.mcp_client import MCPServer, MCPSessionState, MCPToolsEnvironment
from rollgate.resources_servers.registry import EnvSpec


class MCPEntry(BaseModel):
    """The options of a `kind: mcp` entry."""

    model_config = ConfigDict(extra="forbid")
    name: str
    command: list[str] | None = None
    url: str | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    verifier: str = Field(description='"module:function" scoring a session: verify(env, state, request)')
    description: str = ""
    tool_timeout_s: float = Field(default=30.0, gt=0)
    idle_timeout_s: float = Field(default=300.0, gt=0)
    connect_timeout_s: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _one_server(self) -> MCPEntry:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of `command` (stdio argv) or `url` (streamable HTTP)")
        if ":" not in self.verifier:
            raise ValueError(f'verifier must be "module:function", got {self.verifier!r}')
        return self

    def server(self) -> MCPServer:
        return MCPServer(
            command=self.command,
            url=self.url,
            env=self.env,
            cwd=self.cwd,
            headers=self.headers,
            connect_timeout_s=self.connect_timeout_s,
        )


class ConfiguredMCPState(MCPSessionState):
    row: dict[str, Any] = Field(default_factory=dict)  # the task row's environment fields


def _load_verifier(path: str, where: str) -> Callable[..., Any]:
    module, _, attr = path.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise BadRequest(
            f"{where}.verifier: cannot load {path!r}: {type(exc).__name__}: {exc}", component="env", field="envs"
        ) from None
    if not callable(fn):
        raise BadRequest(f"{where}.verifier: {path!r} is not callable", component="env", field="envs")
    return fn


def spec_from_config(options: dict[str, Any], where: str) -> EnvSpec:
    entry = parse_options(MCPEntry, options, where)
    verifier = _load_verifier(entry.verifier, where)

    class ConfiguredMCPEnvironment(MCPToolsEnvironment):
        State = ConfiguredMCPState
        tool_timeout_s = entry.tool_timeout_s
        idle_timeout_s = entry.idle_timeout_s

        def seed(self, task: TaskRow, rng) -> ConfiguredMCPState:
            return ConfiguredMCPState(row=task.env_fields)

        async def verify(self, state: ConfiguredMCPState, request: VerifyRequest) -> VerifyResult:
            result = verifier(self, state, request)
            if inspect.isawaitable(result):
                result = await result
            if isinstance(result, VerifyResult):
                return result
            return VerifyResult(reward=float(result))

    return configured_spec(
        ConfiguredMCPEnvironment,
        name=entry.name,
        kind="mcp",
        description=entry.description or f"tools of {entry.server().describe()}",
        where=where,
        build=lambda cls: cls(entry.server()),
    )
