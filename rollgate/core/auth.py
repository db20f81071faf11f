"""Bearer-token auth for the gateway and the agent server.

One shared token (settings.api_key), compared in constant time. /healthz stays open for probes,
/metrics for scrapers, the OpenAPI document, and the viewer's static files (the page holds no data: it calls the
authenticated API with the token the user types in)."""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass

from fastapi import FastAPI, Request
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
    expected = f"Bearer {api_key}".encode()
    app.state.auth = OpenPaths(open_paths, open_prefixes)  # the OpenAPI document marks the rest secured

    @app.middleware("http")
    async def bearer_auth(request: Request, call_next):
        if app.state.auth.is_open(request.url.path):
            return await call_next(request)
        given = request.headers.get("authorization")
        if given is None:
            err = Unauthorized(
                "missing bearer token: send the header `Authorization: Bearer <api key>`",
                component=component,
                field="authorization",
            )
        elif not hmac.compare_digest(given.encode(), expected):
            err = Unauthorized("wrong bearer token", component=component, field="authorization")
        else:
            return await call_next(request)
        return FastJSONResponse(err.body(), status_code=401, headers={"www-authenticate": "Bearer"})

    # An HTTP middleware never sees a WebSocket handshake (e.g. OpenEnv's /ws): those are checked here.
    app.add_middleware(WebSocketBearer, expected=expected)


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


class WebSocketBearer:
    """Refuse a WebSocket handshake without the bearer token: closing before accepting makes the
    server answer the handshake with HTTP 403."""

    def __init__(self, app: ASGIApp, *, expected: bytes):
        self.app = app
        self.expected = expected

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            given = next((v for k, v in scope["headers"] if k == b"authorization"), None)
            if given is None or not hmac.compare_digest(given, self.expected):
                await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong bearer token"})
                return
        await self.app(scope, receive, send)
