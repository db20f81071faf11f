"""The embedded shape (role `all`): every part in one process on one port.

The model service and every environment runtime live in process (memory session stores, or
Redis when a URL is set); agent workers consume the in-memory job queue; the gateway routes,
the model routes (/v1/responses, /v1/models), the environment routes (/envs/{env}/...) and the
agent's POST /run share one app. Parts call each other directly, never over HTTP. Auth is off
unless settings.api_key is set."""

from __future__ import annotations

import logging

from fastapi import FastAPI

from rollgate.agent_server.server import run_router
from rollgate.core.metrics import Metrics
from rollgate.core.settings import Settings
from rollgate.gateway.model_routes import model_router
from rollgate.gateway.server import create_gateway_app
from rollgate.gateway.weights import LocalReplica, WeightsFanoutRoutes
from rollgate.jobs import make_queue
from rollgate.jobs.worker import Worker
from rollgate.resources_servers.lazy_routes import envs_router
from rollgate.stack.agents import embedded_endpoints
from rollgate.stack.parts import local_stack

log = logging.getLogger("rollgate.embedded")

DRAIN_TIMEOUT_S = 10.0


def build_app(settings: Settings) -> FastAPI:
    metrics = Metrics()
    stack = local_stack(settings, metrics, endpoints=embedded_endpoints(settings))
    queue = make_queue(settings)
    # the worker runs each task with its job's agent (the shipped loop unless the job names another)
    worker = Worker(queue, stack.agents, concurrency=settings.agent.concurrency, metrics=metrics)

    async def startup() -> None:
        worker.start()

    async def shutdown() -> None:
        await worker.stop(drain_timeout_s=DRAIN_TIMEOUT_S)
        await stack.aclose()

    app = create_gateway_app(
        settings,
        queue,
        known_envs=lambda: sorted(stack.runtimes),
        # /envs/<name>/...: each environment's routes are built on its first request (start-up
        # would otherwise grow ~25 ms for every installed environment)
        routers=[model_router(stack.service), envs_router(stack.runtimes), run_router(stack.agents)],
        ready=stack.service.ready,
        metrics=metrics,
        api_key=settings.api_key if settings.gateway.auth else None,
        on_startup=[startup],
        on_shutdown=[shutdown],
        title="Rollgate (embedded)",
        registry=stack.registry,
    )
    WeightsFanoutRoutes([LocalReplica(stack.service)]).install(app)  # POST /v1/weights, in process
    app.state.worker = worker
    app.state.runtimes = stack.runtimes
    app.state.service = stack.service
    app.state.stack = stack
    return app
