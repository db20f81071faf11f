"""Bearer-token auth for every service (gateway, agent, model, resources, sandbox).

One shared token (settings.api_key; the sandbox service has its own), compared in constant time,
on every HTTP request and every WebSocket handshake, the internal channel's included. /healthz
stays open for probes, /metrics for scrapers, the OpenAPI document, and the viewer's static files
(the page holds no data: it calls the authenticated API with the token the user types in)."""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from rollgate.core.app import FastJSONResponse
from rollgate.core.errors import Unauthorized
from rollgate.core.settings import Settings

log = logging.getLogger("rollgate.auth")

OPEN_PATHS = ("/healthz", "/metrics", "/openapi.json", "/docs")
OPEN_PREFIXES = ("/ui",)


@dataclass(frozen=True)
class OpenPaths:
    paths: tuple[str, ...]
    prefixes: tuple[str, ...]

    def is_open(self, path: str) -> bool:
        return path in self.paths or any(path == p or path.startswith(p + "/") for p in self.prefixes)


def require_bearer(
    app: FastAPI,
    api_key: str,
    *,
    component: str,
    open_paths: tuple[str, ...] = OPEN_PATHS,
    open_prefixes: tuple[str, ...] = OPEN_PREFIXES,
) -> None:
    """Every route of `app` but the open ones needs `Authorization: Bearer <api_key>`. Call it
    after the app's other middleware is added: it must be the outermost layer, so a request
    without the token is refused before its body is read."""
    if not api_key:
        raise ValueError("api_key: an empty token would let anyone in")
    app.state.auth = OpenPaths(open_paths, open_prefixes)  # the OpenAPI document marks the rest secured
    app.add_middleware(BearerAuth, expected=f"Bearer {api_key}".encode(), open=app.state.auth, component=component)


class BearerAuth:
    """A plain ASGI middleware (Starlette's `@app.middleware("http")` costs a task group per
    request and never sees a WebSocket). A refused WebSocket is closed before it is accepted,
    which makes the server answer the handshake with HTTP 403."""

    def __init__(self, app: ASGIApp, *, expected: bytes, open: OpenPaths, component: str):
        self.app = app
        self.expected = expected
        self.open = open
        self.component = component

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket") or (kind == "http" and self.open.is_open(scope["path"])):
            await self.app(scope, receive, send)
            return
        given = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                given = value
                break
        if given is not None and hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        if kind == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong bearer token"})
            return
        if given is None:
            err = Unauthorized(
                "missing bearer token: send the header `Authorization: Bearer <api key>`",
                component=self.component,
                field="authorization",
            )
        else:
            err = Unauthorized("wrong bearer token", component=self.component, field="authorization")
        response = FastJSONResponse(err.body(), status_code=401, headers={"www-authenticate": "Bearer"})
        await response(scope, receive, send)


def auth_required_but_missing(role: str) -> str:
    return (
        f"rollgate serve --role {role} needs an API token: set ROLLGATE_API_KEY (or api_key in the config "
        "file), or disable auth explicitly with --no-auth / ROLLGATE_GATEWAY__AUTH=false"
    )


def auth_key(settings: Settings, role: str) -> str | None:
    """The token this role enforces; refuses to run open unless auth was switched off explicitly."""
    if not settings.gateway.auth:
        log.warning("auth is disabled (gateway.auth=false): anyone who can reach port %d can use it", settings.port)
        return None
    if not settings.api_key:
        raise SystemExit(auth_required_but_missing(role))
    return settings.api_key


def configured_key(settings: Settings, role: str) -> str | None:
    """The token an internal service (model, resources) enforces: the key when one is configured
    and auth is on. Without one the service stays open (the gateway is the front door) and says so."""
    if settings.gateway.auth and settings.api_key:
        return settings.api_key
    if settings.gateway.auth:
        log.warning(
            "role %s: no API key configured (ROLLGATE_API_KEY): its routes are open to anyone who can reach it", role
        )
    return None
