"""The HTTP face every service shares: a FastAPI factory with /healthz, /metrics, orjson
responses, a request-size limit, and one error body shape for every failure."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.types import ASGIApp, Receive, Scope, Send

from rollgate.core import jsonutil
from rollgate.core.errors import CapacityError, PayloadTooLarge, RollgateError

log = logging.getLogger("rollgate.http")

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024


class FastJSONResponse(JSONResponse):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return jsonutil.dumps(content)


def error_response(err: RollgateError) -> JSONResponse:
    headers = {}
    if isinstance(err, CapacityError):
        headers["Retry-After"] = str(max(1, int(round(err.retry_after_s))))
    return FastJSONResponse(err.body(), status_code=err.status, headers=headers)


class BodySizeLimit:
    """Refuse a declared body over the limit with 413 before it is read.

    A plain ASGI middleware: Starlette's `@app.middleware("http")` runs every request through a
    task group and a streamed response, which cost more than the rest of a small request."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, component: str):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.component = component

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == b"content-length":
                    if value.isdigit() and int(value) > self.max_body_bytes:
                        resp = error_response(
                            PayloadTooLarge(
                                f"request body of {value.decode()} bytes exceeds the limit of {self.max_body_bytes}",
                                component=self.component,
                                field="body",
                            )
                        )
                        await resp(scope, receive, send)
                        return
                    break
        await self.app(scope, receive, send)


def _validation_field(loc: tuple | list) -> str:
    # ("body", "responses_create_params", "input") -> "responses_create_params.input"
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


def validation_response(exc: RequestValidationError, component: str) -> JSONResponse:
    """422 naming the first bad field, plus up to 20 details."""
    errors = exc.errors()
    first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request"}
    field = _validation_field(first.get("loc", ()))
    body = {
        "error": {
            "kind": "bad_request",
            "component": component,
            "field": field,
            "message": f"{field}: {first.get('msg')}",
            "details": [{"field": _validation_field(e.get("loc", ())), "message": e.get("msg")} for e in errors[:20]],
        }
    }
    return FastJSONResponse(body, status_code=422)


def internal_error_response(exc: Exception, component: str) -> JSONResponse:
    log.exception("unhandled error in %s", component)
    body = {"error": {"kind": "internal", "component": component, "message": f"{type(exc).__name__}: {exc}"}}
    return FastJSONResponse(body, status_code=500)


# --- hot routes ---------------------------------------------------------------------------------
# A hot route is served by `HotRoutes`, a plain ASGI layer in front of FastAPI's router: no
# dependency solving, no response re-validation, no per-request route walk. Its handler is the
# same one the FastAPI route of that path calls (the route still serves other mounts, e.g. the
# gateway's /envs/{name}, and documents the path in OpenAPI), so both ways answer alike.

HotHandler = Callable[[dict[str, str], bytes], Awaitable[Response]]
# With `with_headers=True` the handler also gets the request's raw ASGI headers (lower-case names).
HotHandlerWithHeaders = Callable[[dict[str, str], bytes, list[tuple[bytes, bytes]]], Awaitable[Response]]


@dataclass(frozen=True)
class HotRoute:
    method: str
    pattern: re.Pattern[str]
    handler: HotHandler | HotHandlerWithHeaders
    with_headers: bool = False


def _path_regex(path: str) -> re.Pattern[str]:
    # "/sessions/{session_id}/tools/{tool_name}" -> named groups matching one path segment each
    return re.compile(re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(path)))


def hot_route(
    app: FastAPI, method: str, path: str, handler: HotHandler | HotHandlerWithHeaders, *, with_headers: bool = False
) -> None:
    """Serve `method path` with `handler(path_params, body[, headers])` ahead of FastAPI's router."""
    app.state.hot_routes.append(HotRoute(method.upper(), _path_regex(path), handler, with_headers))


class HotRoutes:
    def __init__(self, app: ASGIApp, *, routes: list[HotRoute], component: str):
        self.app = app
        self.routes = routes  # shared with app.state.hot_routes: routes may be added after build
        self.component = component

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            method, path = scope["method"], scope["path"]
            for route in self.routes:
                if route.method == method and (m := route.pattern.fullmatch(path)):
                    await self._serve(route, m.groupdict(), scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _serve(self, route: HotRoute, params: dict[str, str], scope: Scope, receive: Receive, send: Send) -> None:
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away: nobody to answer
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        try:
            body = b"".join(chunks)
            if route.with_headers:
                response = await route.handler(params, body, scope["headers"])  # type: ignore[call-arg]
            else:
                response = await route.handler(params, body)  # type: ignore[call-arg]
        except RollgateError as exc:
            response = error_response(exc)
        except RequestValidationError as exc:
            response = validation_response(exc, self.component)
        except Exception as exc:  # noqa: BLE001 - the same 500 body as the app's handler
            response = internal_error_response(exc, self.component)
        await response(scope, receive, send)


def make_app(
    title: str,
    *,
    component: str,
    registry: CollectorRegistry | None = None,
    ready: Callable[[], bool] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    version: str = "1",
) -> FastAPI:
    """An app with the routes and error handling every Rollgate service shares."""
    app = FastAPI(title=title, version=version, default_response_class=FastJSONResponse)
    app.state.registry = registry if registry is not None else CollectorRegistry()
    app.state.component = component

    app.state.hot_routes = []
    app.add_middleware(HotRoutes, routes=app.state.hot_routes, component=component)
    app.add_middleware(BodySizeLimit, max_body_bytes=max_body_bytes, component=component)  # outermost

    @app.exception_handler(RollgateError)
    async def _rollgate_error(_: Request, exc: RollgateError):
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError):
        return validation_response(exc, component)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception):
        return internal_error_response(exc, component)

    @app.get("/healthz", tags=["ops"])
    async def healthz():
        if ready is not None and not ready():
            return FastJSONResponse({"status": "starting"}, status_code=503)
        return {"status": "ok", "component": component}

    @app.get("/metrics", tags=["ops"], include_in_schema=False)
    async def metrics():
        return Response(generate_latest(app.state.registry), media_type=CONTENT_TYPE_LATEST)

    return app


async def read_json(request: Request, *, component: str, field: str = "body") -> Any:
    """Parse a JSON body with orjson; malformed JSON is a 400 naming the field."""
    return parse_json(await request.body(), component=component, field=field)


def parse_json(raw: bytes, *, component: str, field: str = "body") -> Any:
    from rollgate.core.errors import BadRequest

    if not raw:
        raise BadRequest("request body is empty; a JSON object was expected", component=component, field=field)
    try:
        return jsonutil.loads(raw)
    except jsonutil.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}", component=component, field=field) from None
