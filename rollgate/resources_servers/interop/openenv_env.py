"""The `openenv` kind: an unmodified OpenEnv `Environment` as a Rollgate environment.

    envs:
      - {name: echo, kind: openenv, url: "http://127.0.0.1:8000"}          # a running OpenEnv server
      - {name: counter, kind: openenv, env_class: "my_envs.counter:CounterEnvironment"}   # in process

Each Rollgate session owns one OpenEnv episode: seeding opens it (a WebSocket to the server, or
an instance of the class) and resets it with the row's `seed` (plus the row's `openenv_reset`
object as extra reset arguments); the reset observation is the model's first observation.

Tools. An MCP-style environment (its Action is OpenEnv's `CallToolAction`, e.g. an
`MCPEnvironment`) exposes its MCP tools, listed once at start-up; a call is a step with
`CallToolAction(tool_name, arguments)`. Any other exposes one tool, `step`, whose parameters are
the Action's JSON Schema less the base class's `metadata` (framework data, not the model's).
A tool's output is the observation's fields as text (one string field: that string); `reward`,
`done` and `metadata` are not shown to the model.

Reward. `reward: sum` (default) adds the rewards of the observations `step` returned (None
counts 0; reset's is not counted); `reward: final` takes the last one. Once an observation says
`done`, the OpenEnv episode is closed and every later tool call is an error output saying the
episode is over. Verify needs no connection: it reads the rewards kept in the session state.

Nothing but a tool call reaches the environment: the model never reaches reset, state, close or
verify, whatever name it gives a tool. A server that cannot be reached, dies, answers garbage or
does not answer within `tool_timeout_s` ends the episode with env_error naming its URL or class
(openenv_targets.py); never a reward.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rollgate.core import jsonutil
from rollgate.core.blocking import run_sync
from rollgate.core.errors import BadRequest, CapacityError, ProtocolError, UpstreamError
from rollgate.core.schemas import TaskRow, VerifyRequest, VerifyResult
from rollgate.resources_servers.base import Environment, ToolError
from rollgate.resources_servers.external import configured_spec, parse_options
from rollgate.resources_servers.interop.openenv_local import OpenEnvClass
from rollgate.resources_servers.interop.openenv_targets import (
    COMPONENT,
    ActionRejected,
    OpenEnvServer,
    Result,
    call_tool_text,
    observation_text,
)
from rollgate.resources_servers.interop.tool_specs import PerInstance, SchemaToolSpec, bind_tool
from rollgate.resources_servers.registry import EnvSpec

OVER = "the episode is over (the environment reported done): answer without calling tools"


class OpenEnvState(BaseModel):
    """Per session: the key of the live episode in this process, and the rewards seen so far."""

    openenv_key: str
    rewards: list[float | None] = Field(default_factory=list)
    done: bool = False


@dataclass
class _Live:
    episode: Any  # openenv_targets._SocketEpisode | _LocalEpisode
    last_used: float


def _is_call_tool(schema: dict[str, Any]) -> bool:
    props = schema.get("properties") or {}
    return "tool_name" in props and "arguments" in props


class OpenEnvEnvironment(Environment):
    """Hosts one OpenEnv environment (a server or a class: `target`). Built per configured entry
    by `spec_from_config`; build it directly for tests and scripts."""

    name = "openenv"
    State = OpenEnvState
    reverify = "never"  # the OpenEnv episode is gone once the session closes
    max_sessions: ClassVar[int] = 256  # live episodes (connections or instances) in this process

    def __init__(
        self,
        target: OpenEnvServer | OpenEnvClass,
        *,
        reward: Literal["sum", "final"] = "sum",
        tools: Literal["auto", "mcp", "step"] = "auto",
        tool_timeout_s: float = 30.0,
        idle_timeout_s: float = 300.0,
        max_sessions: int | None = None,
    ):
        self.target = target
        self.reward_mode = reward
        self.tool_timeout_s = tool_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_sessions = max_sessions or type(self).max_sessions
        self._episodes: dict[str, _Live] = {}
        self._reaper: asyncio.Task | None = None
        action = target.action_schema()
        self.mode = ("mcp" if _is_call_tool(action) else "step") if tools == "auto" else tools
        self._specs = self._mcp_tools() if self.mode == "mcp" else self._step_tool(action)

    # --- tools, found once at start-up ------------------------------------------------------
    def _spec(self, i: int, name: str, description: str, schema: dict[str, Any]) -> SchemaToolSpec:
        import jsonschema

        schema = {k: v for k, v in schema.items() if k != "title"}
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        self._validators[name] = jsonschema.Draft202012Validator(schema)
        return bind_tool(self, f"_openenv_tool_{i}", self._call, name, description, schema)

    def _step_tool(self, action: dict[str, Any]) -> dict[str, SchemaToolSpec]:
        self._validators: dict[str, Any] = {}
        schema = jsonutil.loads(jsonutil.dumps(action))
        schema.get("properties", {}).pop("metadata", None)
        if "required" in schema:
            schema["required"] = [r for r in schema["required"] if r != "metadata"]
        about = schema.pop("description", None) or f"Act in the environment ({self.target.describe()})."
        return {"step": self._spec(0, "step", f"Take one step: {about}", schema)}

    def _mcp_tools(self) -> dict[str, SchemaToolSpec]:
        self._validators = {}

        async def list_tools() -> Result:
            episode = await self.target.open()
            try:
                return await episode.step({"type": "list_tools"}, self.tool_timeout_s)
            finally:
                await episode.aclose()

        try:
            tools = run_sync(list_tools())["observation"].get("tools")
        except ActionRejected as exc:
            raise ProtocolError(f"{self.target.describe()} refused list_tools: {exc}", component=COMPONENT) from None
        if not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools
        ):
            raise ProtocolError(
                f"{self.target.describe()} answered list_tools without a list of tools: {str(tools)[:200]!r}",
                component=COMPONENT,
            )
        return {
            t["name"]: self._spec(i, t["name"], str(t.get("description") or ""), dict(t.get("input_schema") or {}))
            for i, t in enumerate(tools)
        }

    tool_specs = PerInstance(lambda env: {} if env is None else env._specs)  # type: ignore[assignment]
    tool_schemas = PerInstance(  # type: ignore[assignment]
        lambda env: [] if env is None else [s.openai_schema() for s in env._specs.values()]
    )

    # --- the session's episode ----------------------------------------------------------------
    async def seed(self, task: TaskRow, rng) -> tuple[OpenEnvState, str | None]:
        extra = task.env_fields.get("openenv_reset") or {}
        if not isinstance(extra, dict):
            raise ValueError("openenv_reset must be an object: the extra keyword arguments of reset()")
        if len(self._episodes) >= self.max_sessions:
            raise CapacityError(
                f"{self.target.describe()}: {self.max_sessions} OpenEnv episodes are open in this process",
                component=COMPONENT,
            )
        state = OpenEnvState(openenv_key=secrets.token_urlsafe(12))
        seed = task.seed if task.seed is not None else rng.getrandbits(31)
        episode = await self.target.open()
        try:
            first = await episode.reset({**extra, "seed": seed, "episode_id": state.openenv_key}, self.tool_timeout_s)
            self._reward_done(first, "reset")
        except BaseException:
            await episode.aclose()
            raise
        if first.get("done"):
            state.done = True
            await episode.aclose()
        else:
            self._episodes[state.openenv_key] = _Live(episode, time.monotonic())
            if self._reaper is None or self._reaper.done():
                self._reaper = asyncio.get_running_loop().create_task(self._reap())
        return state, observation_text(first["observation"])

    def _live(self, state: OpenEnvState) -> _Live:
        live = self._episodes.get(state.openenv_key)
        if live is not None and live.episode.alive:
            live.last_used = time.monotonic()
            return live
        self._episodes.pop(state.openenv_key, None)
        why = f" ({live.episode.broken})" if live is not None else ""
        raise UpstreamError(
            f"{self.target.describe()}: this session's OpenEnv episode is gone{why}: it failed, was idle over "
            f"{self.idle_timeout_s:g}s, or was opened by another replica (sessions are pinned to one)",
            component=COMPONENT,
        )

    def _reward_done(self, result: Result, what: str) -> tuple[float | None, bool]:
        reward, done = result.get("reward"), result.get("done", False)
        if (reward is not None and not isinstance(reward, int | float)) or not isinstance(done, bool):
            raise ProtocolError(
                f"{self.target.describe()} answered {what} with reward {reward!r} and done {done!r}: "
                "expected a number (or null) and a boolean",
                component=COMPONENT,
            )
        return (None if reward is None else float(reward)), done

    async def _call(self, tool_name: str, state: OpenEnvState, root: dict[str, Any]) -> str:
        if state.done:
            raise ToolError(OVER)
        errors = sorted(self._validators[tool_name].iter_errors(root), key=lambda e: list(e.path))
        if errors:
            where = ".".join(str(p) for p in errors[0].path) or "arguments"
            raise ToolError(f"invalid arguments for {tool_name}: {where}: {errors[0].message}")
        action = root if self.mode == "step" else {"type": "call_tool", "tool_name": tool_name, "arguments": root}
        live = self._live(state)
        try:
            result = await live.episode.step(action, self.tool_timeout_s)
        except ActionRejected as exc:
            raise ToolError(f"invalid arguments for {tool_name}: {exc}") from None
        except BaseException:
            if not live.episode.alive:
                await self._release(state.openenv_key)
            raise
        reward, done = self._reward_done(result, "step")
        state.rewards.append(reward)
        if self.mode == "mcp":
            text, is_error = call_tool_text(result["observation"])
        else:
            text, is_error = observation_text(result["observation"]) or "ok", False
        if done:
            state.done = True
            await self._release(state.openenv_key)
            text = f"{text}\n[{OVER}]"
        if is_error:
            raise ToolError(text)
        return text

    async def verify(self, state: OpenEnvState, request: VerifyRequest) -> VerifyResult:
        rewards = [r or 0.0 for r in state.rewards]
        last = rewards[-1] if rewards else 0.0
        reward = float(sum(rewards)) if self.reward_mode == "sum" else last
        return VerifyResult(reward=reward, metrics={"openenv_steps": len(rewards), "openenv_done": state.done})

    async def _release(self, key: str) -> None:
        live = self._episodes.pop(key, None)
        if live is not None:
            await live.episode.aclose()

    async def close_session(self, state: OpenEnvState) -> None:
        await self._release(state.openenv_key)

    async def _reap(self) -> None:
        while self._episodes:
            await asyncio.sleep(min(5.0, self.idle_timeout_s / 2))
            now = time.monotonic()
            for key, live in list(self._episodes.items()):
                if now - live.last_used > self.idle_timeout_s or not live.episode.alive:
                    await self._release(key)

    async def aclose(self) -> None:
        """Close every open episode (shutdown and tests)."""
        for key in list(self._episodes):
            await self._release(key)
        if self._reaper is not None:
            self._reaper.cancel()


# --- configuration: `envs: [{name, kind: openenv, ...}]` (resources_servers/external.py) ------------
_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


class OpenEnvEntry(BaseModel):
    """The options of a `kind: openenv` entry."""

    model_config = ConfigDict(extra="forbid")
    name: str
    env_class: str | None = Field(None, description='"module:Class": an OpenEnv Environment run in this process')
    url: str | None = Field(None, description="a running OpenEnv server (its /ws and /schema)")
    action_class: str | None = Field(None, description='"module:Action" (env_class only; default: from step())')
    env_kwargs: dict[str, Any] = Field(default_factory=dict, description="env_class only: constructor arguments")
    tools: Literal["auto", "mcp", "step"] = "auto"
    reward: Literal["sum", "final"] = "sum"
    description: str = ""
    tool_timeout_s: float = Field(default=30.0, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    idle_timeout_s: float = Field(default=300.0, gt=0)
    max_sessions: int = Field(default=256, ge=1)

    @field_validator("env_class", "action_class")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is not None and not _PATH.match(value):
            raise ValueError(f'expected "module:Class", got {value!r}')
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(https?|wss?)://[^/\s]+", value):
            raise ValueError(f"expected an http(s):// or ws(s):// URL, got {value!r}")
        return value

    @model_validator(mode="after")
    def _one_target(self) -> OpenEnvEntry:
        if (self.env_class is None) == (self.url is None):
            raise ValueError('give exactly one of env_class ("module:Class", in process) or url (an OpenEnv server)')
        if self.url is not None and (self.action_class or self.env_kwargs):
            raise ValueError("action_class and env_kwargs apply to env_class only (a server knows its own)")
        return self

    def target(self) -> OpenEnvServer | OpenEnvClass:
        if self.url is not None:
            return OpenEnvServer(self.url, connect_timeout_s=self.connect_timeout_s)
        return OpenEnvClass.load(self.env_class or "", action_class=self.action_class, kwargs=self.env_kwargs)


def spec_from_config(options: dict[str, Any], where: str) -> EnvSpec:
    """The EnvSpec of one entry. Nothing is imported or contacted here: building the environment
    (start-up of the process serving it) does that, and its errors name the entry too."""
    entry = parse_options(OpenEnvEntry, options, where)
    need = "openenv" if entry.env_class else "websockets"
    available = importlib.util.find_spec(need) is not None

    def build(cls: type[OpenEnvEnvironment]) -> OpenEnvEnvironment:
        try:
            target = entry.target()
        except ValueError as exc:
            raise BadRequest(f"{where}.{exc}", component="env", field="envs") from None
        return cls(
            target,
            reward=entry.reward,
            tools=entry.tools,
            tool_timeout_s=entry.tool_timeout_s,
            idle_timeout_s=entry.idle_timeout_s,
            max_sessions=entry.max_sessions,
        )

    return configured_spec(
        OpenEnvEnvironment,
        name=entry.name,
        kind="openenv",
        description=entry.description or f"OpenEnv environment {entry.env_class or entry.url}",
        where=where,
        build=build,
        available=available,
        reason=None if available else f'the {need} package is missing: pip install "rollgate[interop]"',
    )
