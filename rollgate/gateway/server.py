"""The gateway (role `gateway`): the one front door of the distributed shape.

It accepts rollout jobs into the Redis job queue (agent workers run them), serves their progress
and results, and proxies the model pool (/v1/responses, /v1/models) and the environments'
replicas (/envs/{env}/...). `create_gateway_app` is shared with the embedded shape."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, FastAPI

from rollgate.agent_server.plugins import AgentRegistry
from rollgate.core.app import make_app
from rollgate.core.auth import auth_key, require_bearer
from rollgate.core.errors import RollgateError
from rollgate.core.metrics import Metrics
from rollgate.core.replicas import ReplicaSet
from rollgate.core.settings import Settings
from rollgate.gateway.jobs import jobs_router
from rollgate.gateway.proxy import Forwarder, proxy_router
from rollgate.gateway.weights import http_fanout
from rollgate.jobs import make_queue
from rollgate.jobs.queue import JobQueue
from rollgate.model_server.api_docs import ModelShape
from rollgate.resources_servers.registry import EnvRegistry, registry_for

log = logging.getLogger("rollgate.gateway")

Hook = Callable[[], Awaitable[None]]


def create_gateway_app(
    settings: Settings,
    queue: JobQueue,
    *,
    known_envs: Callable[[], list[str]],
    routers: list[APIRouter],
    metrics: Metrics,
    api_key: str | None,
    on_startup: list[Hook] = (),
    on_shutdown: list[Hook] = (),
    title: str = "Rollgate gateway",
    ready: Callable[[], bool] | None = None,
    registry: EnvRegistry | None = None,
) -> FastAPI:
    """`registry`: the environments whose classes the gateway knows, for the checks at submit
    (default: the one settings describe; the embedded shape passes its stack's)."""
    if registry is None:
        try:
            registry = registry_for(settings)
        except RollgateError as exc:
            raise SystemExit(f"setting envs: {exc.message}") from None
    app = make_app(title, component="gateway", registry=metrics.registry, ready=ready)
    app.state.queue = queue
    app.state.metrics = metrics
    if api_key:
        require_bearer(app, api_key, component="gateway")
    app.include_router(
        jobs_router(
            queue,
            known_envs=known_envs,
            model_name=settings.model.served_name,
            known_models=[settings.model.served_name, *settings.role_models],
            max_task_bytes=settings.gateway.max_task_bytes,
            retry_errors=settings.gateway.retry_errors,
            metrics=metrics,
            # the agents a job may name: installed plugins and settings.agents (the agent workers
            # must be configured alike, as for environments)
            agents=AgentRegistry(settings.agents),
            registry=registry,
        )
    )
    for router in routers:
        app.include_router(router)
    if settings.gateway.ui:
        try:
            from rollgate.gateway.ui import ui_router
        except ImportError:
            log.info("trajectory viewer not installed; /ui is off")
        else:
            app.include_router(ui_router())

    gauge_task: list[asyncio.Task] = []

    async def refresh_queue_depth() -> None:
        while True:
            with contextlib.suppress(Exception):
                metrics.queue_depth.set(await queue.queued())
            # and notice by itself a running job whose state Redis lost (rollgate.jobs.redis_loss)
            with contextlib.suppress(Exception):
                await queue.sweep_lost()
            await asyncio.sleep(2.0)

    async def startup() -> None:
        for hook in on_startup:
            await hook()
        try:
            problem = await queue.persistence_warning()
        except Exception as exc:  # noqa: BLE001 - an unreachable queue is reported by /healthz and doctor
            problem = None
            log.warning("could not check the job queue's persistence: %s", exc)
        if problem:
            log.warning("job queue: %s; set appendonly yes on Redis (see `rollgate doctor`)", problem)
        gauge_task.append(asyncio.create_task(refresh_queue_depth()))

    async def shutdown() -> None:
        for t in gauge_task:
            t.cancel()
        for hook in on_shutdown:
            try:
                await hook()
            except Exception:  # one failing hook must not keep the others from closing
                log.exception("shutdown hook failed")
        await queue.close()

    app.router.on_startup.append(startup)
    app.router.on_shutdown.append(shutdown)
    return app


def build_app(settings: Settings) -> FastAPI:
    if not settings.redis_url:
        raise SystemExit(
            "rollgate serve --role gateway needs --redis-url (the job queue the agent workers read); "
            "for a single process use --role all"
        )
    api_key = auth_key(settings, "gateway")
    metrics = Metrics()
    queue = make_queue(settings)
    forwarder = Forwarder(api_key=settings.api_key, timeout_s=settings.model.timeout_s + 30)
    envs = {name: ReplicaSet(urls, what=f"env {name}") for name, urls in settings.env_urls.items() if urls}
    model = ReplicaSet([settings.model_url], what="model") if settings.model_url else None
    if model is None:
        log.warning("no model_url set: /v1/responses and /v1/models answer 404")
    hooks = [forwarder.aclose]
    replicas = settings.model_urls or ([settings.model_url] if settings.model_url else [])
    weights = http_fanout(replicas, api_key=settings.api_key) if replicas else None
    if weights is not None:
        hooks.append(weights.aclose)
    app = create_gateway_app(
        settings,
        queue,
        known_envs=lambda: sorted(envs),
        routers=[proxy_router(forwarder, model=model, envs=envs, shape=ModelShape.from_settings(settings))],
        metrics=metrics,
        api_key=api_key,
        on_shutdown=hooks,
    )
    if weights is not None:
        weights.install(app)  # POST /v1/weights: to every model replica
    return app
