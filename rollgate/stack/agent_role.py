"""The agent role (`rollgate serve --role agent`): POST /run, and, with a Redis URL, a worker that
runs the gateway's rollout jobs from the queue (settings.agent.concurrency episodes at once).
The model and the environments are reached over HTTP (rollgate.stack.parts.remote_stack)."""

from __future__ import annotations

from fastapi import FastAPI

from rollgate.agent_server.server import run_router
from rollgate.core.app import make_app
from rollgate.core.auth import auth_key, require_bearer
from rollgate.core.metrics import Metrics
from rollgate.core.settings import Settings
from rollgate.jobs import make_queue
from rollgate.jobs.worker import Worker
from rollgate.stack.parts import remote_stack

DRAIN_TIMEOUT_S = 30.0  # on shutdown, running episodes get this long to finish before hand-back


def build_app(settings: Settings) -> FastAPI:
    api_key = auth_key(settings, "agent")
    metrics = Metrics()
    stack = remote_stack(settings, metrics)
    app = make_app("Rollgate agent server", component="agent", registry=metrics.registry)
    if api_key:
        require_bearer(app, api_key, component="agent")
    worker: Worker | None = None
    if settings.redis_url:
        worker = Worker(make_queue(settings), stack.agents, concurrency=settings.agent.concurrency, metrics=metrics)
    app.state.agent = stack.agent
    app.state.worker = worker
    app.include_router(run_router(stack.agents))

    async def startup() -> None:
        if worker is not None:
            worker.start()

    async def shutdown() -> None:
        if worker is not None:
            await worker.stop(drain_timeout_s=min(DRAIN_TIMEOUT_S, settings.agent.episode_timeout_s))
            await worker.queue.close()
        await stack.aclose()

    app.router.on_startup.append(startup)
    app.router.on_shutdown.append(shutdown)
    return app
