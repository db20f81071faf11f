"""Build a resources-server app from settings (the `resources` role)."""

from __future__ import annotations

from fastapi import FastAPI

from rollgate.core.metrics import Metrics
from rollgate.core.session_store import MemorySessionStore, RedisSessionStore, SessionStore
from rollgate.core.settings import Settings
from rollgate.resources_servers.app import create_resources_app
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.registry import load_env


def make_store(settings: Settings, env_name: str) -> SessionStore:
    if settings.redis_url:
        return RedisSessionStore(
            settings.redis_url,
            prefix=f"rollgate:env:{env_name}",
            ttl_s=settings.sessions.ttl_s,
            capacity=settings.sessions.capacity,
        )
    return MemorySessionStore(ttl_s=settings.sessions.ttl_s, capacity=settings.sessions.capacity)


def env_options(settings: Settings, env_name: str, metrics: Metrics | None = None) -> dict:
    """Constructor options of an environment that come from settings."""
    if env_name == "code":
        sb = settings.sandbox
        return {
            "provider": sb.provider,
            "metrics": metrics,
            **({"pool_size": sb.pool_size} if sb.pool_size else {}),
            **sb.options,
        }
    return {}


def make_runtime(settings: Settings, env_name: str, metrics: Metrics | None = None) -> EnvRuntime:
    env = load_env(env_name, **env_options(settings, env_name, metrics))
    return EnvRuntime(env, make_store(settings, env_name), metrics=metrics)


def build_app(settings: Settings, env_name: str) -> FastAPI:
    metrics = Metrics()
    runtime = make_runtime(settings, env_name, metrics)
    app = create_resources_app(runtime, registry=metrics.registry)

    @app.on_event("shutdown")
    async def _close_store() -> None:
        await runtime.store.close()

    return app
