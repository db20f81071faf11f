"""The environment routes of a process that serves many environments (the embedded shape):
`/envs/<name>/...` for every runtime, each environment's routes built on its first request.

Building every environment's routes up front costs ~25 ms an environment (FastAPI analyses each
route's signature): seconds at start-up once a hundred environments are installed, for routes
most runs never call. The agent of the same process calls its runtimes directly, not over HTTP.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter
from fastapi.openapi.utils import get_openapi
from starlette._utils import get_route_path
from starlette.types import Receive, Scope, Send

from rollgate.core.errors import NotFound
from rollgate.core.openapi import documented_mounts
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

    def openapi_paths(self, prefix: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """Every environment's routes under `prefix/<name>` (rollgate.core.openapi.OpenAPIPaths):
        building the document builds each router, once, as its first request would."""
        paths: dict[str, Any] = {}
        schemas: dict[str, Any] = {}
        for name in sorted(self.runtimes):
            routes = self.router(name).routes
            doc = get_openapi(title=name, version="1", routes=routes)
            paths.update({f"{prefix}/{name}{path}": item for path, item in doc.get("paths", {}).items()})
            schemas.update(doc.get("components", {}).get("schemas", {}))
            for path, inner in documented_mounts(routes):  # e.g. an interop face that documents itself
                more, more_schemas = inner.openapi_paths(f"{prefix}/{name}{path}")
                paths.update(more)
                schemas.update(more_schemas)
        return paths, schemas

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = self._name(get_route_path(scope))
        child = dict(scope, root_path=scope.get("root_path", "") + "/" + name)
        await self.router(name)(child, receive, send)


def envs_router(runtimes: Mapping[str, EnvRuntime]) -> APIRouter:
    """A router holding the lazy /envs mount, for apps assembled from routers."""
    r = APIRouter()
    r.mount("/envs", LazyEnvRoutes(runtimes))
    return r
