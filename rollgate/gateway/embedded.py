"""The embedded shape (role `all`): every part in one process on one port.

The model service and every environment runtime live in process (memory session stores, or
Redis when a URL is set); agent workers consume the in-memory job queue; the gateway routes,
the model routes (/v1/responses, /v1/models), the environment routes (/envs/{env}/...) and the
agent's POST /run share one app. Parts call each other directly, never over HTTP. Auth is off
unless settings.api_key is set."""

from __future__ import annotations

import inspect
import logging
from typing import Any

from fastapi import APIRouter, FastAPI

from rollgate.agent_server.agent import Agent
from rollgate.agent_server.server import run_router
from rollgate.agent_server.worker import Worker
from rollgate.core.metrics import Metrics
from rollgate.core.settings import Settings
from rollgate.gateway.model_routes import model_router
from rollgate.gateway.server import create_gateway_app, make_queue
from rollgate.model_server.client import LocalModelClient
from rollgate.resources_servers.app import env_router, nemo_gym_router
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.client import LocalEnvClient
from rollgate.resources_servers.server import make_runtime

log = logging.getLogger("rollgate.embedded")

DRAIN_TIMEOUT_S = 10.0


def load_runtimes(settings: Settings, metrics: Metrics | None = None) -> dict[str, EnvRuntime]:
    runtimes: dict[str, EnvRuntime] = {}
    for name in settings.envs:
        try:
            runtimes[name] = make_runtime(settings, name, metrics)
        except Exception as exc:  # one broken environment must not take the others down
            log.error("environment %s is not available: %s: %s", name, type(exc).__name__, exc)
    if not runtimes:
        raise SystemExit(f"none of the environments {settings.envs} could be loaded; see the errors above")
    return runtimes


def env_routers(runtimes: dict[str, EnvRuntime]) -> list[APIRouter]:
    routers = []
    for name, rt in runtimes.items():
        r = APIRouter(prefix=f"/envs/{name}")
        r.include_router(env_router(rt))
        r.include_router(nemo_gym_router(rt))
        routers.append(r)
    return routers


async def _maybe(call: Any) -> None:
    if call is not None:
        result = call()
        if inspect.isawaitable(result):
            await result


def build_app(settings: Settings) -> FastAPI:
    from rollgate.model_server.server import build_service

    metrics = Metrics()
    service = build_service(settings, metrics=metrics)
    runtimes = load_runtimes(settings, metrics)
    queue = make_queue(settings)
    agent = Agent(
        LocalModelClient(service),
        {n: LocalEnvClient(rt) for n, rt in runtimes.items()},
        settings.agent,
        model_name=settings.model.served_name,
        metrics=metrics,
    )
    worker = Worker(queue, agent, concurrency=settings.agent.concurrency, metrics=metrics)

    async def startup() -> None:
        await _maybe(getattr(service, "start", None))
        worker.start()

    async def shutdown() -> None:
        await worker.stop(drain_timeout_s=DRAIN_TIMEOUT_S)
        for rt in runtimes.values():
            await rt.store.close()
        await _maybe(getattr(service, "aclose", None) or getattr(service, "close", None))

    app = create_gateway_app(
        settings,
        queue,
        known_envs=lambda: sorted(runtimes),
        routers=[model_router(service), *env_routers(runtimes), run_router(agent)],
        ready=service.ready,
        metrics=metrics,
        api_key=settings.api_key if settings.gateway.auth else None,
        on_startup=[startup],
        on_shutdown=[shutdown],
        title="Rollgate (embedded)",
    )
    app.state.worker = worker
    app.state.runtimes = runtimes
    app.state.service = service
    return app
