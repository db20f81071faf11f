"""Model client + environments + agent, built once for every shape that runs episodes:

- `local_stack`: everything in this process: the embedded shape (role all) and a trainer's
  in-process rollouts (it passes its own model service, weights shared). Environments get their
  settings-derived options (e.g. the `code` environment's sandbox) through `make_runtime`.
- `remote_stack`: the agent role: the model server and the environment replicas over HTTP.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from rollgate.agent_server.agent import Agent
from rollgate.agent_server.plugins import AgentSet, Endpoints
from rollgate.core.errors import RollgateError
from rollgate.core.http import RetryPolicy
from rollgate.core.metrics import Metrics
from rollgate.core.settings import Settings
from rollgate.model_server.client import HttpModelClient, LocalModelClient
from rollgate.model_server.service import ModelService
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.client import LocalEnvClient
from rollgate.resources_servers.failed import failed_runtime
from rollgate.resources_servers.registry import EnvRegistry, registry_for
from rollgate.resources_servers.replicas import ReplicatedEnvClient
from rollgate.resources_servers.server import make_runtime
from rollgate.stack.agents import agent_set, local_captures, remote_captures, remote_endpoints

log = logging.getLogger("rollgate.stack")


@dataclass
class Stack:
    agent: Agent
    runtimes: dict[str, EnvRuntime] = field(default_factory=dict)  # in-process environments
    service: ModelService | None = None  # the in-process model service, if any
    agents: AgentSet | None = None  # every agent a job may name, `agent` included (stack/agents.py)
    registry: EnvRegistry | None = None  # the environments the runtimes came from (local stacks)

    async def aclose(self) -> None:
        """Close what this stack opened: stores, clients, the model service."""
        if self.agents is not None:
            await self.agents.aclose()
            if self.agents.parts.captures is not None:
                await self.agents.parts.captures.aclose()
        for rt in self.runtimes.values():
            await rt.store.close()
            await rt.env.aclose()
        for client in self.agent.envs.values():
            await client.aclose()
        await self.agent.model.aclose()
        if self.service is not None:
            await self.service.aclose()


def settings_registry(settings: Settings) -> EnvRegistry:
    """The installed environments and the entries of settings.envs; a bad entry stops start-up."""
    try:
        return registry_for(settings)
    except RollgateError as exc:
        raise SystemExit(f"setting envs: {exc.message}") from None


def load_runtimes(
    settings: Settings, metrics: Metrics, names: Sequence[str] | None = None, *, registry: EnvRegistry | None = None
) -> dict[str, EnvRuntime]:
    """Runtimes of the configured environments (of `registry`, default: the one settings describe).
    One that fails to start is logged and kept as a stand-in whose episodes end as env_error naming
    the cause (resources_servers/failed.py)."""
    runtimes: dict[str, EnvRuntime] = {}
    registry = registry if registry is not None else settings_registry(settings)
    try:  # names and glob patterns ("*": every available environment) -> environment names
        wanted = registry.resolve(list(names) if names is not None else settings.envs)
    except RollgateError as exc:
        raise SystemExit(f"setting envs: {exc.message}") from None
    failed = 0
    for name in wanted:
        try:
            runtimes[name] = make_runtime(settings, name, metrics, registry=registry)
        except Exception as exc:  # one broken environment must not take the others down
            log.error("environment %s failed to start: %s: %s", name, type(exc).__name__, exc)
            runtimes[name] = failed_runtime(name, exc)
            failed += 1
    if failed == len(wanted):
        raise SystemExit(f"none of the environments {wanted} could be loaded; see the errors above")
    return runtimes


def local_stack(
    settings: Settings,
    metrics: Metrics | None = None,
    *,
    service: ModelService | None = None,
    envs: Sequence[str] | None = None,
    endpoints: Endpoints | None = None,
) -> Stack:
    """Every part in process. `service` defaults to the one settings.model describes. `endpoints`:
    where this stack is served over HTTP (harness agents need it; stack/agents.py)."""
    metrics = metrics if metrics is not None else Metrics.off()
    if service is None:
        from rollgate.model_server.server import build_service

        service = build_service(settings, metrics=metrics)
    registry = settings_registry(settings)
    runtimes = load_runtimes(settings, metrics, envs, registry=registry)
    agent = Agent(
        LocalModelClient(service),
        {name: LocalEnvClient(rt) for name, rt in runtimes.items()},
        settings.agent,
        model_name=service.served_name,
        metrics=metrics,
    )
    agents = agent_set(agent, settings, metrics, endpoints=endpoints, captures=local_captures(service))
    return Stack(agent=agent, runtimes=runtimes, service=service, agents=agents, registry=registry)


def remote_stack(settings: Settings, metrics: Metrics | None = None) -> Stack:
    """The agent role: settings.model_url and settings.env_urls ({env: [replica URLs]})."""
    metrics = metrics if metrics is not None else Metrics.off()
    if not settings.model_url:
        raise SystemExit("rollgate serve --role agent needs the model server: set ROLLGATE_MODEL_URL")
    envs = {name: urls for name, urls in settings.env_urls.items() if urls}
    if not envs:
        raise SystemExit(
            'rollgate serve --role agent needs environments: set ROLLGATE_ENV_URLS, e.g. {"math": ["http://host:8300"]}'
        )
    a = settings.agent

    def retry(component: str) -> RetryPolicy:
        return RetryPolicy(attempts=max(1, a.retries), on_retry=metrics.retries.labels(component).inc)

    # Every replica when they are listed: an episode's calls stay on one (its prefix cache) and a
    # stalled replica is failed over from, which a load balancer in front of them cannot do.
    model = HttpModelClient(
        settings.model_urls or settings.model_url,
        timeout_s=a.model_timeout_s,
        api_key=settings.api_key,
        retry=retry("model"),
        channel=a.channel,
    )
    clients = {
        name: ReplicatedEnvClient(
            name,
            urls,
            timeout_s=a.tool_timeout_s,
            api_key=settings.api_key,
            retry=retry(f"env:{name}"),
            channel=a.channel,
        )
        for name, urls in envs.items()
    }
    agent = Agent(model, clients, a, model_name=settings.model.served_name, metrics=metrics)
    agents = agent_set(
        agent, settings, metrics, endpoints=remote_endpoints(settings), captures=remote_captures(settings)
    )
    return Stack(agent=agent, agents=agents)
