"""Agents as plugins: the entry point group `rollgate.agents`, and the set of agents a worker runs.

An agent is anything that turns one parsed task into one Trajectory:

    async def run(task: Task, ctx: RunContext) -> Trajectory

An entry point names a factory `(parts: AgentParts, options: Mapping) -> agent`. `parts` holds what
every agent may use (the model client, the environment clients, the agent settings and their
budgets, the served model's name, metrics, and for agents that run outside this process the HTTP
endpoints and the capture-session reader); `options` come from a settings entry
(`agents: [{name, kind, ...options}]`, kind = an entry point name) and are empty for a plugin used
by its own name. A factory may carry `options_model` (a pydantic model): options are then
validated when the registry loads, so a plugin that cannot run without configuration (the
`harness` kind needs a command) is listed as unavailable, with the reason, instead of failing
every task of a job.

Failures are typed like the shipped loop's: an episode that fails returns a Trajectory with an
error outcome and no reward; a task the agent refuses outright raises a RollgateError (the worker
records a FailureRecord). Rollgate's own agents register the same way, in its pyproject.toml.
Nothing is imported at module import; a plugin that fails to load is reported in `broken` and
the others load as usual (like rollgate.resources_servers.registry).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Protocol

from pydantic import ValidationError

from rollgate.agent_server.agent import AGENT_NAME, Agent, RunContext
from rollgate.agent_server.captures import CaptureSource
from rollgate.agent_server.role_harness import RoleHarness
from rollgate.agent_server.roles import RolesRunner
from rollgate.core.errors import BadRequest, validation_summary
from rollgate.core.metrics import Metrics
from rollgate.core.rows import Task
from rollgate.core.schemas import EpisodeRecord, RolePolicy, Trajectory
from rollgate.core.settings import AgentEntry, AgentSettings
from rollgate.model_server.client import ModelClient
from rollgate.resources_servers.client import EnvClient

log = logging.getLogger("rollgate.agents")

GROUP = "rollgate.agents"
DEFAULT_AGENT = AGENT_NAME  # the shipped agent loop (rollgate.agent_server.agent)


class EpisodeAgent(Protocol):
    async def run(self, task: Task, ctx: RunContext | None = None) -> Trajectory: ...


@dataclass(frozen=True)
class Endpoints:
    """Where a process outside Rollgate (a harness) reaches the parts over HTTP on loopback."""

    model_url: str  # serves /v1/... and /capture/{session}/v1/...
    envs_url: str | None = None  # serves /{env}/sessions/{id}/mcp for every environment (a gateway's /envs)
    env_urls: Mapping[str, str] = field(default_factory=dict)  # env -> base serving /sessions/{id}/mcp
    api_key: str | None = None

    def env_url(self, env: str) -> str | None:
        """The base URL of one environment's routes (its MCP endpoint is under it), if known."""
        if env in self.env_urls:
            return self.env_urls[env]
        return f"{self.envs_url.rstrip('/')}/{env}" if self.envs_url else None


@dataclass
class AgentParts:
    """What an agent plugin is given (see the module docstring)."""

    model: ModelClient
    envs: Mapping[str, EnvClient]
    settings: AgentSettings
    model_name: str
    metrics: Metrics = field(default_factory=Metrics.off)
    endpoints: Endpoints | None = None  # None: no HTTP face (e.g. a trainer's in-process rollouts)
    captures: CaptureSource | None = None


AgentFactory = Callable[[AgentParts, Mapping[str, Any]], EpisodeAgent]


def rollgate_loop(parts: AgentParts, options: Mapping[str, Any]) -> Agent:
    """The shipped agent loop (entry point `rollgate`). It takes no options: its budgets are the
    agent settings."""
    if options:
        raise BadRequest(
            f"agent kind {DEFAULT_AGENT!r} takes no options, got {sorted(options)}", component="agent", field="agents"
        )
    return Agent(parts.model, parts.envs, parts.settings, model_name=parts.model_name, metrics=parts.metrics)


@dataclass(frozen=True)
class AgentSpec:
    name: str
    factory: AgentFactory
    options: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""  # "name = module:attr", or "agents[i] (kind K)" for a settings entry
    available: bool = True
    reason: str | None = None  # why it cannot run as configured


@dataclass(frozen=True)
class BrokenAgent:
    source: str
    distribution: str | None
    error: str


def _describe(ep: EntryPoint) -> str:
    return f"{ep.name} = {ep.value}"


def _checked(name: str, factory: AgentFactory, options: Mapping[str, Any], source: str) -> AgentSpec:
    model = getattr(factory, "options_model", None)
    if model is not None and "name" in getattr(model, "model_fields", {}) and "name" not in options:
        options = {**options, "name": name}  # errors and logs name the agent as the job does
    if model is not None:
        try:
            model.model_validate(dict(options))
        except ValidationError as exc:
            reason = validation_summary(exc, default="options", limit=1)
            return AgentSpec(name, factory, dict(options), source, available=False, reason=reason)
    return AgentSpec(name, factory, dict(options), source)


@functools.cache
def _installed() -> tuple[tuple[AgentSpec, ...], tuple[BrokenAgent, ...]]:
    """The installed plugins, loaded once per process (entry points do not change while it runs)."""
    return load_entry_points(list(entry_points(group=GROUP)))


def load_entry_points(eps: Sequence[EntryPoint]) -> tuple[tuple[AgentSpec, ...], tuple[BrokenAgent, ...]]:
    specs: dict[str, AgentSpec] = {}
    broken: list[BrokenAgent] = []
    # Rollgate's own entry points first, so a plugin cannot silently replace a shipped name.
    for ep in sorted(eps, key=lambda ep: (getattr(ep.dist, "name", "") != "rollgate", ep.name)):
        dist = getattr(ep.dist, "name", None)
        try:
            target = ep.load()
            if not callable(target):
                raise TypeError(f"names {type(target).__name__}, expected a factory (parts, options) -> agent")
        except Exception as exc:  # a broken plugin is reported, never fatal to the others
            broken.append(BrokenAgent(_describe(ep), dist, f"{type(exc).__name__}: {exc}"))
            log.warning("agent plugin %r (%s) is broken: %s: %s", _describe(ep), dist, type(exc).__name__, exc)
            continue
        if ep.name in specs:
            broken.append(
                BrokenAgent(_describe(ep), dist, f"agent name {ep.name!r} is taken by {specs[ep.name].source}")
            )
            continue
        specs[ep.name] = _checked(ep.name, target, {}, _describe(ep))
    return tuple(specs.values()), tuple(broken)


class AgentRegistry:
    """The installed agent plugins plus the agents configured by entry (settings.agents)."""

    def __init__(self, entries: Sequence[AgentEntry] = (), *, installed: Sequence[AgentSpec] | None = None):
        base, broken = (tuple(installed), ()) if installed is not None else _installed()
        self.broken: list[BrokenAgent] = list(broken)
        self.specs: dict[str, AgentSpec] = {s.name: s for s in base}
        for i, entry in enumerate(entries):
            where = f"agents[{i}] (kind {entry.kind})"
            kind = self.specs.get(entry.kind)
            if entry.name in self.specs:
                taken = f"agent name {entry.name!r} is taken by {self.specs[entry.name].source}"
                self.broken.append(BrokenAgent(where, None, taken))
            elif kind is None:
                kinds = ", ".join(sorted(s.name for s in base))
                self.broken.append(BrokenAgent(where, None, f"unknown agent kind {entry.kind!r}; kinds: {kinds}"))
            else:
                self.specs[entry.name] = _checked(entry.name, kind.factory, entry.options, where)

    def names(self, *, available_only: bool = True) -> list[str]:
        return sorted(n for n, s in self.specs.items() if s.available or not available_only)

    def role_agents(self) -> list[str]:
        """The agents besides the shipped loop that can play a role of a multi-role episode: those
        built from a factory marked `plays_roles` (the harness kinds), available as configured."""
        return sorted(n for n, s in self.specs.items() if s.available and getattr(s.factory, "plays_roles", False))

    def get(self, name: str) -> AgentSpec:
        spec = self.specs.get(name)
        if spec is None:
            raise BadRequest(unknown_agent(name, self.names()), component="agent", field="agent")
        if not spec.available:
            raise BadRequest(
                f"agent: {name!r} cannot run as configured: {spec.reason} "
                f"(configure it as an `agents` entry with kind {name!r}; see docs/agents.md)",
                component="agent",
                field="agent",
            )
        return spec

    def describe(self) -> list[dict[str, Any]]:
        """For `GET /v1/agents`: every agent with where it comes from and whether it can run."""
        return [
            {"name": s.name, "source": s.source, "available": s.available, "reason": s.reason}
            for s in sorted(self.specs.values(), key=lambda s: s.name)
        ]


def unknown_agent(name: str, known: Sequence[str]) -> str:
    return f"agent: unknown agent {name!r}; known: {', '.join(known) or 'none'} (GET /v1/agents lists them)"


class _RolePlayers:
    """What the roles loop may seat beside itself (rollgate.agent_server.role_harness.RolePlayers)."""

    def __init__(self, agents: AgentSet):
        self.agents = agents

    def names(self) -> list[str]:
        return self.agents.registry.role_agents()

    def get(self, name: str) -> RoleHarness:
        agent = self.agents.get(name)
        if not isinstance(agent, RoleHarness):
            raise BadRequest(f"agent: {name!r} cannot play a role", component="agent", field="agent")
        return agent


class AgentSet:
    """The agents one worker runs: `run(task, ctx)` runs the task with `ctx.agent` (default: the
    shipped loop). Each agent is built from its plugin on first use and kept."""

    def __init__(
        self,
        parts: AgentParts,
        registry: AgentRegistry,
        *,
        prebuilt: Mapping[str, EpisodeAgent] | None = None,
        default: str = DEFAULT_AGENT,
        models: Mapping[str, Any] | None = None,
    ):
        self.parts = parts
        self.registry = registry
        self.default = default
        self._built: dict[str, EpisodeAgent] = dict(prebuilt or {})
        self.models: dict[str, Any] = dict(models or {})  # models a role may name beside the loop's own
        self._roles: RolesRunner | None = None

    @property
    def envs(self) -> Mapping[str, EnvClient]:
        return self.parts.envs

    def names(self) -> list[str]:
        return sorted(set(self.registry.names()) | set(self._built))

    def get(self, name: str | None) -> EpisodeAgent:
        name = name or self.default
        agent = self._built.get(name)
        if agent is None:
            spec = self.registry.get(name)
            try:
                agent = spec.factory(self.parts, spec.options)
            except BadRequest:
                raise
            except Exception as exc:
                raise BadRequest(
                    f"agent: {name!r} ({spec.source}) could not be built: {type(exc).__name__}: {exc}",
                    component="agent",
                    field="agent",
                ) from None
            self._built[name] = agent
        return agent

    async def run(self, task: Task, ctx: RunContext | None = None) -> Trajectory | EpisodeRecord:
        ctx = ctx or RunContext()
        if ctx.roles:  # a multi-role episode: one trajectory per role (rollgate.agent_server.roles)
            if self._roles is None:
                base = self.get(DEFAULT_AGENT)
                assert isinstance(base, Agent)
                self._roles = RolesRunner(base, self.models, _RolePlayers(self))
            policies = {r: RolePolicy.model_validate(p) for r, p in ctx.roles.items()}
            return await self._roles.run(task, dataclasses.replace(ctx, roles=None), policies)
        agent = self.get(ctx.agent)
        # The name has done its job here (a configured entry may alias a kind under another name).
        return await agent.run(task, dataclasses.replace(ctx, agent=None))

    async def aclose(self) -> None:
        for agent in self._built.values():
            closer = getattr(agent, "aclose", None)
            if closer is not None and not isinstance(agent, Agent):  # the stack closes the loop's clients
                await closer()
        for model in self.models.values():
            await model.aclose()
