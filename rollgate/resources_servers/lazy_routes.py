"""The environment routes of a process that serves many environments (the embedded shape):
`/envs/<name>/...` for every runtime, each environment's routes built on its first request.

Building every environment's routes up front costs ~25 ms an environment (FastAPI analyses each
route's signature): seconds at start-up once a hundred environments are installed, for routes
most runs never call. The agent of the same process calls its runtimes directly, not over HTTP.
"""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import APIRouter
from starlette._utils import get_route_path
from starlette.types import Receive, Scope, Send

from rollgate.core.errors import NotFound
from rollgate.resources_servers.app import env_router, nemo_gym_router
from rollgate.resources_servers.base import EnvRuntime


class LazyEnvRoutes:
    """An ASGI app to mount at /envs."""

    def __init__(self, runtimes: Mapping[str, EnvRuntime]):
        self.runtimes = runtimes
        self._routers: dict[str, APIRouter] = {}

    def _name(self, path: str) -> str:
        parts = path.lstrip("/").split("/")
        # a name holds at most one "/" (family/member): the longer match wins
        for k in (2, 1):
            name = "/".join(parts[:k])
            if len(parts) > k and name in self.runtimes:
                return name
        raise NotFound(
            f"unknown environment in path {path!r} ({len(self.runtimes)} are served here: see `rollgate envs`)",
            component="gateway",
            field="env",
        )

    def router(self, name: str) -> APIRouter:
        router = self._routers.get(name)
        if router is None:
            router = env_router(self.runtimes[name])
            nemo_gym_router(self.runtimes[name], router)
            self._routers[name] = router
        return router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = self._name(get_route_path(scope))
        child = dict(scope, root_path=scope.get("root_path", "") + "/" + name)
        await self.router(name)(child, receive, send)


def envs_router(runtimes: Mapping[str, EnvRuntime]) -> APIRouter:
    """A router holding the lazy /envs mount, for apps assembled from routers."""
    r = APIRouter()
    r.mount("/envs", LazyEnvRoutes(runtimes))
    return r
