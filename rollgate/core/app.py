"""The HTTP face every service shares: a FastAPI factory with /healthz, /metrics, orjson
responses, a request-size limit, and one error body shape for every failure."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel
from starlette._utils import get_route_path
from starlette.exceptions import HTTPException
from starlette.routing import Mount, compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rollgate.core import jsonutil
from rollgate.core.channel import CHANNEL_PATH, NOT_HERE, serve_channel
from rollgate.core.errors import BadRequest, CapacityError, PayloadTooLarge, RollgateError, field_of, reason_of
from rollgate.core.openapi import install_openapi
from rollgate.core.schemas import ErrorKind

log = logging.getLogger("rollgate.http")

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
_BODILESS = frozenset(("GET", "HEAD", "OPTIONS", "DELETE"))


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
    """Refuse a body over the limit with 413: a declared one (Content-Length) before it is read,
    a streamed one (chunked) as soon as the bytes received pass the limit, without reading the rest.

    A plain ASGI middleware: Starlette's `@app.middleware("http")` runs every request through a
    task group and a streamed response, which cost more than the rest of a small request."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, component: str, per_path: dict[str, int] | None = None):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.component = component
        # Paths with a limit of their own (e.g. a weights upload); shared with app.state.body_limits.
        self.per_path = per_path if per_path is not None else {}

    def _too_large(self, size: str, limit: int) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"request body of {size} bytes exceeds the limit of {limit}", component=self.component, field="body"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.per_path.get(scope["path"], self.max_body_bytes) if self.per_path else self.max_body_bytes
        chunked = False
        for name, value in scope["headers"]:
            if name == b"content-length":
                if value.isdigit() and int(value) > limit:
                    await error_response(self._too_large(value.decode(), limit))(scope, receive, send)
                    return
                # The server delivers no more than the declared length: nothing to count.
                await self.app(scope, receive, send)
                return
            if name == b"transfer-encoding":
                chunked = True
        if chunked or scope["method"] not in _BODILESS:
            await self._counted(scope, receive, send, limit)
        else:  # no length, not chunked: HTTP/1.1 says there is no body (a plain GET)
            await self.app(scope, receive, send)

    async def _counted(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        """A body of no declared length: count its bytes as they arrive. Past the limit, the
        app's next read raises PayloadTooLarge (its error handler answers 413); an app that lets
        it through gets the 413 from here, if it has not started answering."""
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise self._too_large(f"more than {limit}", limit)
            return message

        async def watching_send(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, watching_send)
        except PayloadTooLarge as exc:
            if started:
                raise
            await error_response(exc)(scope, receive, send)


def _validation_field(error: Mapping[str, Any]) -> str:
    # ("body", "responses_create_params", "input") -> "responses_create_params.input"
    return field_of(error, skip=("body", "query", "path")) or "body"


def validation_response(exc: RequestValidationError, component: str) -> JSONResponse:
    """422 naming the first bad field, plus up to 20 details."""
    errors = exc.errors()
    first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request"}
    field = _validation_field(first)
    body = {
        "error": {
            "kind": "bad_request",
            "component": component,
            "field": field,
            "message": f"{field}: {reason_of(first)}",
            "details": [{"field": _validation_field(e), "message": reason_of(e)} for e in errors[:20]],
        }
    }
    return FastJSONResponse(body, status_code=422)


def _route_methods(routes: list, prefix: str = "") -> Iterator[tuple[str, set[str]]]:
    """(path template, methods) of every method route, in included routers too (FastAPI keeps
    those nested); mounts answer for their own paths."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            context = getattr(route, "include_context", None)
            yield from _route_methods(included.routes, prefix + getattr(context, "prefix", ""))
        elif getattr(route, "methods", None) and hasattr(route, "path") and not isinstance(route, Mount):
            yield prefix + route.path, set(route.methods)


def allowed_methods(app: FastAPI, path: str) -> set[str]:
    """The methods of the first route template matching `path` (the one Starlette picked),
    gathered over every route of that template: each method may be a route of its own."""
    table = list(_route_methods(app.router.routes))
    template = next((t for t, _ in table if compile_path(t)[0].match(path)), None)
    return {m for t, methods in table if t == template for m in methods}


def http_error_response(app: FastAPI, request: Request, exc: HTTPException, component: str) -> JSONResponse:
    """Starlette's own answers (no route for the path, or not for the method) in the error shape.
    A 405's Allow names every method of the path: Starlette's names only the one route it tried."""
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        methods = set(headers.get("Allow", "").replace(" ", "").split(",")) - {""}
        headers["Allow"] = ", ".join(sorted(methods | allowed_methods(app, get_route_path(request.scope))))
    kind = ErrorKind.not_found if exc.status_code == 404 else ErrorKind.bad_request
    message = f"{request.method} {request.url.path}: {exc.detail}"
    body = {"error": {"kind": kind.value, "component": component, "message": message}}
    return FastJSONResponse(body, status_code=exc.status_code, headers=headers)


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
        elif scope["type"] == "websocket" and scope["path"] == CHANNEL_PATH:
            await serve_channel(self.respond, receive, send)  # core/channel.py: the hot routes, multiplexed
            return
        await self.app(scope, receive, send)

    async def _answer(
        self, route: HotRoute, params: dict[str, str], body: bytes, headers: list[tuple[bytes, bytes]]
    ) -> Response:
        try:
            if route.with_headers:
                return await route.handler(params, body, headers)  # type: ignore[call-arg]
            return await route.handler(params, body)  # type: ignore[call-arg]
        except RollgateError as exc:
            return error_response(exc)
        except RequestValidationError as exc:
            return validation_response(exc, self.component)
        except Exception as exc:  # noqa: BLE001 - the same 500 body as the app's handler
            return internal_error_response(exc, self.component)

    async def respond(
        self, method: str, path: str, body: bytes, headers: list[tuple[bytes, bytes]]
    ) -> tuple[int, bytes]:
        """One request that came over the channel: (status, body), as HTTP would answer it."""
        for route in self.routes:
            if route.method == method and (m := route.pattern.fullmatch(path)):
                response = await self._answer(route, m.groupdict(), body, headers)
                break
        else:  # not a hot route here (e.g. a family's /envs/<name>/...): the client uses HTTP for it
            return NOT_HERE, b""
        out = getattr(response, "body", None)
        if not isinstance(out, bytes):  # a streamed answer: only HTTP carries it
            response = error_response(
                BadRequest(f"{method} {path} streams its answer: use HTTP", component=self.component, field="stream")
            )
            out = response.body
        return response.status_code, out

    async def _serve(self, route: HotRoute, params: dict[str, str], scope: Scope, receive: Receive, send: Send) -> None:
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away: nobody to answer
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        response = await self._answer(route, params, b"".join(chunks), scope["headers"])
        await response(scope, receive, send)


class Health(BaseModel):
    status: Literal["ok", "starting"]
    component: str


def install_error_handlers(app: FastAPI, component: str) -> None:
    """Rollgate's error bodies for typed errors, request validation and anything unexpected
    (every service's app, and sub-apps such as the OpenEnv face)."""

    @app.exception_handler(RollgateError)
    async def _rollgate_error(_: Request, exc: RollgateError):
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError):
        return validation_response(exc, component)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception):
        return internal_error_response(exc, component)


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
    app.router.route_class = json_route(component)  # routes added on the app itself parse with parse_json
    app.state.registry = registry if registry is not None else CollectorRegistry()
    app.state.component = component

    app.state.hot_routes = []
    app.add_middleware(HotRoutes, routes=app.state.hot_routes, component=component)
    app.state.body_limits = {}  # path -> bytes, for routes that take more than max_body_bytes
    app.add_middleware(
        BodySizeLimit, max_body_bytes=max_body_bytes, component=component, per_path=app.state.body_limits
    )  # outermost

    install_error_handlers(app, component)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException):
        return http_error_response(app, request, exc, component)

    install_openapi(app)

    @app.get("/healthz", tags=["ops"], responses={503: {"model": Health, "description": "not ready yet"}})
    async def healthz() -> Health:
        if ready is not None and not ready():
            return FastJSONResponse({"status": "starting", "component": component}, status_code=503)
        return Health(status="ok", component=component)

    @app.get("/metrics", tags=["ops"], include_in_schema=False)
    async def metrics():
        return Response(generate_latest(app.state.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def json_route(component: str) -> type[APIRoute]:
    """A route class whose JSON body FastAPI parses with `parse_json` (orjson, the nesting limit),
    so a route with a pydantic body answers a too-deep body with the same 400 naming the field as
    `read_json` does, not FastAPI's "There was an error parsing the body" (or nothing at all when
    the deep part is an ignored extra field)."""

    class JsonRequest(Request):
        async def json(self) -> Any:
            if not hasattr(self, "_json"):
                self._json = parse_json(await self.body(), component=component)
            return self._json

    class JsonRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
            handler = super().get_route_handler()

            async def route(request: Request) -> Response:
                try:
                    return await handler(JsonRequest(request.scope, request.receive))
                except HTTPException as exc:  # FastAPI wraps any body-parsing error in a bare 400
                    if isinstance(exc.__cause__, RollgateError):
                        raise exc.__cause__ from None
                    raise

            return route

    return JsonRoute


async def read_json(request: Request, *, component: str, field: str = "body") -> Any:
    """Parse a JSON body with orjson; malformed JSON is a 400 naming the field."""
    return parse_json(await request.body(), component=component, field=field)


def parse_json(raw: bytes, *, component: str, field: str = "body") -> Any:
    from rollgate.core.errors import BadRequest

    if not raw:
        raise BadRequest("request body is empty; a JSON object was expected", component=component, field=field)
    try:
        value = jsonutil.loads(raw)
    except jsonutil.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}", component=component, field=field) from None
    deep = jsonutil.too_deep(value, raw)
    if deep is not None:
        where = deep if field == "body" else f"{field}.{deep}"
        raise BadRequest(f"{where}: nested deeper than {jsonutil.MAX_DEPTH} levels", component=component, field=where)
    return value
