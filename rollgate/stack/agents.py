"""The agents a stack runs (rollgate.agent_server.plugins): the shipped loop, built by the stack,
and every other agent built from its plugin on first use. Agents that run outside this process
(black-box harnesses) reach the model and the environments over HTTP: `Endpoints` say where."""

from __future__ import annotations

from typing import Any

from rollgate.agent_server.agent import Agent
from rollgate.agent_server.captures import CaptureSource, HttpCaptures, StoreCaptures
from rollgate.agent_server.plugins import DEFAULT_AGENT, AgentParts, AgentRegistry, AgentSet, Endpoints
from rollgate.core.metrics import Metrics
from rollgate.core.settings import Settings
from rollgate.model_server.client import HttpModelClient


def loopback(host: str) -> str:
    """A listening address as a client on this machine dials it."""
    if host in ("0.0.0.0", "", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def embedded_endpoints(settings: Settings) -> Endpoints:
    """Role all: one app on settings.host:port serves the model routes and /envs/{env}/..."""
    base = f"http://{loopback(settings.host)}:{settings.port}"
    return Endpoints(model_url=base, envs_url=f"{base}/envs", api_key=settings.api_key)


def remote_endpoints(settings: Settings) -> Endpoints | None:
    """Role agent: the model server, and each environment through the gateway when one is set
    (else its first replica: the replicas share their sessions)."""
    if not settings.model_url:
        return None
    envs_url = f"{settings.gateway_url.rstrip('/')}/envs" if settings.gateway_url else None
    env_urls = {} if envs_url else {name: urls[0] for name, urls in settings.env_urls.items() if urls}
    return Endpoints(
        model_url=settings.model_url.rstrip("/"), envs_url=envs_url, env_urls=env_urls, api_key=settings.api_key
    )


def agent_set(
    agent: Agent,
    settings: Settings,
    metrics: Metrics,
    *,
    endpoints: Endpoints | None,
    captures: CaptureSource | None,
) -> AgentSet:
    parts = AgentParts(
        model=agent.model,
        envs=agent.envs,
        settings=settings.agent,
        model_name=agent.model_name,
        metrics=metrics,
        endpoints=endpoints,
        captures=captures,
    )
    # the models a role of a multi-role job may name beside the loop's own (docs/roles.md)
    models = {
        name: HttpModelClient(url, timeout_s=settings.agent.model_timeout_s, api_key=settings.api_key)
        for name, url in settings.role_models.items()
    }
    return AgentSet(parts, AgentRegistry(settings.agents), prebuilt={DEFAULT_AGENT: agent}, models=models)


def local_captures(service: Any) -> CaptureSource | None:
    store = getattr(service, "captures", None)
    return StoreCaptures(store) if store is not None else None


def remote_captures(settings: Settings) -> CaptureSource | None:
    return HttpCaptures(settings.model_url, api_key=settings.api_key) if settings.model_url else None
