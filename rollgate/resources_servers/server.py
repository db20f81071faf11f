"""Build a resources-server app from settings (the `resources` role)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, FastAPI

from rollgate.core.app import make_app
from rollgate.core.auth import configured_key, require_bearer
from rollgate.core.errors import NotFound
from rollgate.core.metrics import Metrics
from rollgate.core.session_store import MemorySessionStore, RedisSessionStore, SessionStore
from rollgate.core.settings import Settings
from rollgate.resources_servers.app import create_resources_app, env_router, nemo_gym_router
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.failed import failed_runtime
from rollgate.resources_servers.registry import EnvRegistry, registry_for

log = logging.getLogger("rollgate.resources")


def make_store(settings: Settings, env_name: str) -> SessionStore:
    if settings.redis_url:
        return RedisSessionStore(
            settings.redis_url,
            prefix=f"rollgate:env:{env_name}",
            ttl_s=settings.sessions.ttl_s,
            capacity=settings.sessions.capacity,
        )
    return MemorySessionStore(ttl_s=settings.sessions.ttl_s, capacity=settings.sessions.capacity)


def env_options(
    settings: Settings, env_name: str, metrics: Metrics | None = None, *, family: str | None = None
) -> dict:
    """Constructor options of an environment that come from settings."""
    if env_name == "code":
        sb = settings.sandbox
        return {
            "provider": sb.provider,
            "metrics": metrics,
            **({"pool_size": sb.pool_size} if sb.pool_size else {}),
            **({"url": sb.url, "token": sb.token} if sb.provider == "remote" else {}),
            "allow_unisolated": sb.allow_unisolated,
            **sb.options,
        }
    if family == "swe":
        swe = settings.swe
        return {
            "sandbox": swe.provider,
            "sandbox_options": swe.options,
            "warm_pool": swe.warm_pool,
            "allow_unisolated": settings.sandbox.allow_unisolated,
            "metrics": metrics,
        }
    return {}


def make_runtime(
    settings: Settings, env_name: str, metrics: Metrics | None = None, *, registry: EnvRegistry | None = None
) -> EnvRuntime:
    """The runtime of one environment of `registry` (default: the one settings describe)."""
    registry = registry if registry is not None else registry_for(settings)
    spec = registry.get(env_name)
    env = spec.build(**env_options(settings, env_name, metrics, family=spec.family))
    return EnvRuntime(env, make_store(settings, env_name), metrics=metrics, tasks=spec.tasks)


async def close_runtime(runtime: EnvRuntime) -> None:
    """Shutdown: the session store, and the connections an interop environment holds."""
    await runtime.store.close()
    await runtime.env.aclose()


def expand_envs(spec: str, registry: EnvRegistry) -> list[str]:
    """`--env` of role resources: a name, a comma-separated list, or a pattern over the registry
    ("reasoning_gym/*": a whole family in one service, as core/topology.py deploys families)."""
    names = registry.resolve([p.strip() for p in spec.split(",") if p.strip()])
    if not names:
        raise NotFound("--env names no environment", component="resources", field="env")
    return names


def build_app(settings: Settings, env_name: str) -> FastAPI:
    registry = registry_for(settings)  # `--env ng_weather` may name an entry of settings.envs
    names = expand_envs(env_name, registry)
    if len(names) > 1 or names[0] != env_name:
        return build_multi_app(settings, names, title=env_name, registry=registry)
    metrics = Metrics()
    runtime = make_runtime(settings, env_name, metrics, registry=registry)
    app = create_resources_app(runtime, registry=metrics.registry)

    @app.on_event("shutdown")
    async def _close_store() -> None:
        await close_runtime(runtime)

    return _guarded(app, settings)


def _guarded(app: FastAPI, settings: Settings) -> FastAPI:
    """With a key configured, every route but /healthz, /metrics and the OpenAPI document needs
    it: the native and NeMo Gym routes, MCP, OpenEnv's WebSocket and the internal channel."""
    key = configured_key(settings, "resources")
    if key:
        require_bearer(app, key, component="resources")
    return app


def build_multi_app(
    settings: Settings, names: list[str], *, title: str, registry: EnvRegistry | None = None
) -> FastAPI:
    """One resources service for several environments, each under /envs/<name> (the gateway's
    paths), so a family of a hundred datasets is one process, not a hundred."""
    registry = registry if registry is not None else registry_for(settings)
    metrics = Metrics()
    runtimes: dict[str, EnvRuntime] = {}
    failed: list[str] = []
    for name in names:
        try:
            runtimes[name] = make_runtime(settings, name, metrics, registry=registry)
        except Exception as exc:  # one broken environment of a family must not take the others down
            log.error("environment %s failed to start: %s: %s", name, type(exc).__name__, exc)
            runtimes[name] = failed_runtime(name, exc)  # its sessions answer 502 naming the cause
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    if len(failed) == len(names):
        raise RuntimeError(f"none of the environments of {title} started: {'; '.join(failed[:3])}")
    app = make_app(f"Rollgate resources server: {title}", component="resources", registry=metrics.registry)
    for name, runtime in runtimes.items():
        router = APIRouter(prefix=f"/envs/{name}")
        env_router(runtime, router)
        nemo_gym_router(runtime, router)
        app.include_router(router)

    @app.get("/envs", tags=["envs"], summary="The environments this service serves")
    async def served() -> list[str]:
        return list(runtimes)

    @app.on_event("shutdown")
    async def _close_stores() -> None:
        for runtime in runtimes.values():
            await close_runtime(runtime)

    return _guarded(app, settings)
