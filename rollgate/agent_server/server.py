"""The agent server (role `agent`): `POST /run` {task row} -> Trajectory, and, with a Redis URL,
a worker that runs the gateway's rollout jobs from the queue (settings.agent.concurrency
episodes at once). The model and the environments are reached over HTTP: settings.model_url
and settings.env_urls ({env: [replica URLs]})."""

from __future__ import annotations

import logging
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Query, Request

from rollgate.agent_server.agent import Agent, RunContext
from rollgate.agent_server.worker import Worker
from rollgate.core.app import make_app, read_json
from rollgate.core.errors import BadRequest
from rollgate.core.http import RetryPolicy
from rollgate.core.metrics import Metrics
from rollgate.core.settings import Settings
from rollgate.gateway.auth import require_bearer
from rollgate.gateway.replicas import ReplicatedEnvClient
from rollgate.gateway.server import auth_key, make_queue
from rollgate.model_server.client import HttpModelClient

log = logging.getLogger("rollgate.agent_server")

DRAIN_TIMEOUT_S = 30.0  # on shutdown, running episodes get this long to finish before hand-back


def build_agent(settings: Settings, metrics: Metrics | None = None) -> Agent:
    if not settings.model_url:
        raise SystemExit("rollgate serve --role agent needs the model server: set ROLLGATE_MODEL_URL")
    envs = {name: urls for name, urls in settings.env_urls.items() if urls}
    if not envs:
        raise SystemExit(
            'rollgate serve --role agent needs environments: set ROLLGATE_ENV_URLS, e.g. {"math": ["http://host:8300"]}'
        )
    a = settings.agent

    def retry(component: str) -> RetryPolicy:
        on_retry = metrics.retries.labels(component).inc if metrics is not None else None
        return RetryPolicy(attempts=max(1, a.retries), on_retry=on_retry)

    model = HttpModelClient(
        settings.model_url, timeout_s=a.model_timeout_s, api_key=settings.api_key, retry=retry("model")
    )
    clients = {
        name: ReplicatedEnvClient(
            name, urls, timeout_s=a.tool_timeout_s, api_key=settings.api_key, retry=retry(f"env:{name}")
        )
        for name, urls in envs.items()
    }
    return Agent(model, clients, a, model_name=settings.model.served_name, metrics=metrics)


def run_router(agent: Agent) -> APIRouter:
    r = APIRouter(tags=["agent"])

    @r.post(
        "/run",
        summary="Run one episode of a task row; returns its Trajectory "
        "(or, with format=nemo_gym, NeMo Gym's /run response with token fields)",
    )
    async def run(
        request: Request,
        env: str | None = Query(None, description="environment, else row.env"),
        policy_version: str | None = Query(None),
        format: Literal["trajectory", "nemo_gym"] = Query("trajectory"),
    ) -> dict[str, Any]:
        row = await read_json(request, component="agent")
        if not isinstance(row, dict):
            raise BadRequest("body must be a task row (a JSON object)", component="agent", field="body")
        traj = await agent.run(row, RunContext(policy_version=policy_version), env=env)
        if format == "nemo_gym":
            from rollgate.trainer_adapters.nemo_rl import to_nemo_gym_run_response

            return to_nemo_gym_run_response(traj)
        return traj.model_dump(mode="json")

    return r


def build_app(settings: Settings) -> FastAPI:
    api_key = auth_key(settings, "agent")
    metrics = Metrics()
    agent = build_agent(settings, metrics)
    app = make_app("Rollgate agent server", component="agent", registry=metrics.registry)
    if api_key:
        require_bearer(app, api_key, component="agent")
    worker: Worker | None = None
    if settings.redis_url:
        worker = Worker(make_queue(settings), agent, concurrency=settings.agent.concurrency, metrics=metrics)
    app.state.agent = agent
    app.state.worker = worker

    app.include_router(run_router(agent))

    async def startup() -> None:
        if worker is not None:
            worker.start()

    async def shutdown() -> None:
        if worker is not None:
            await worker.stop(drain_timeout_s=min(DRAIN_TIMEOUT_S, settings.agent.episode_timeout_s))
            await worker.queue.close()
        await agent.model.aclose()
        for client in agent.envs.values():
            await client.aclose()  # type: ignore[attr-defined]

    app.router.on_startup.append(startup)
    app.router.on_shutdown.append(shutdown)
    return app
