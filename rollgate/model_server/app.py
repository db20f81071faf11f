"""The model server's HTTP face: POST /v1/responses, /v1/chat/completions and /v1/messages (JSON
or SSE), GET /v1/responses/{id}, GET /v1/models, the capture routes, plus the shared /healthz and
/metrics. Every model route is served twice: at `/v1/...`, and at `/capture/{session}/v1/...`,
which records the call's tokens to that capture session (the header `x-rollgate-session` does
the same on the plain paths). Training mode per request: header `x-rollgate-training: 1` (or
metadata {"rollgate_training": "true"}, handled by the service)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from starlette.types import Send

from rollgate.core.app import FastJSONResponse, hot_route, make_app, parse_json
from rollgate.core.errors import BadRequest
from rollgate.core.metrics import Metrics
from rollgate.model_server import sse
from rollgate.model_server.api_docs import CAPTURE_DOCS, POST_SUMMARIES, ModelShape, get_docs, post_docs
from rollgate.model_server.capture import SESSION_HEADER, check_session
from rollgate.model_server.dialects import chat_completions, messages
from rollgate.model_server.prepare import TRUE
from rollgate.model_server.service import ModelService
from rollgate.model_server.weights import AdminAuth, add_weights_routes

TRAINING_HEADER = "x-rollgate-training"
_TRAINING_HEADER_RAW = TRAINING_HEADER.encode()
_SESSION_HEADER_RAW = SESSION_HEADER.encode()
CAPTURE_PREFIX = "/capture/{session}"
# every model path, served at /v1/... and at /capture/{session}/v1/...
POST_PATHS = ("/v1/responses", "/v1/chat/completions", "/v1/messages")
GET_PATHS = ("/v1/models", "/v1/responses/{response_id}")
CAPTURE_PATH = "/v1/captures/{session}"


class EventStreamResponse(StreamingResponse):
    """SSE. However the response ends (done, client gone, send failed), the chunk iterator is
    closed at once, so an abandoned generation leaves its batch slot now."""

    def __init__(self, chunks: AsyncIterator[bytes]):
        self.chunks = chunks
        super().__init__(
            chunks,
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.chunks.aclose()  # type: ignore[attr-defined]


async def _encode(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    try:
        async for event in events:
            yield sse.encode(event)
    finally:
        await events.aclose()  # type: ignore[attr-defined]


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    return next((v.decode("latin-1") for k, v in headers if k == name), None)


Dialect = tuple[Callable[..., Awaitable[dict[str, Any]]], Callable[..., Awaitable[AsyncIterator[bytes]]]]


def create_model_app(
    service: ModelService, metrics: Metrics | None = None, *, weights_auth: AdminAuth | None = None
) -> FastAPI:
    """`weights_auth`: who may POST /v1/weights (rollgate.model_server.weights)."""
    app = make_app(
        "Rollgate model server",
        component="model",
        registry=metrics.registry if metrics is not None else None,
        ready=service.ready,
    )
    app.state.service = service

    async def responses_stream(body: Any, *, training: bool | None, session: str | None) -> AsyncIterator[bytes]:
        return _encode(sse.api_events(await service.stream(body, training=training, session=session)))

    dialects: dict[str, Dialect] = {
        "/v1/responses": (service.create, responses_stream),
        "/v1/chat/completions": (
            lambda body, **kw: chat_completions.create(service, body, **kw),
            lambda body, **kw: chat_completions.stream(service, body, **kw),
        ),
        "/v1/messages": (
            lambda body, **kw: messages.create(service, body, **kw),
            lambda body, **kw: messages.stream(service, body, **kw),
        ),
    }

    def handler(path: str):
        create, stream = dialects[path]

        async def handle(params: dict[str, str], raw: bytes, headers: list[tuple[bytes, bytes]]) -> Response:
            body = parse_json(raw, component="model")
            flag = _header(headers, _TRAINING_HEADER_RAW)
            training = (flag is not None and flag.lower() in TRUE) or None
            session = params.get("session") or _header(headers, _SESSION_HEADER_RAW)
            if session is not None:
                check_session(session, field="session" if "session" in params else SESSION_HEADER)
            if not (isinstance(body, dict) and body.get("stream") is True):
                # Returning a Response skips FastAPI's jsonable_encoder walk over the reply.
                return FastJSONResponse(await create(body, training=training, session=session))
            if not isinstance(body, dict):
                raise BadRequest("the request body must be a JSON object", component="model", field="body")
            # Validation happens before the first byte, so its errors keep their HTTP status.
            return EventStreamResponse(await stream(body, training=training, session=session))

        return handle

    # Hot routes serve a standalone model server; the FastAPI routes (the same handlers) serve
    # the gateway's embedded mount and document the paths in OpenAPI (api_docs: the schemas of
    # the models the handlers validate with).
    shape = ModelShape.of(service)
    for path in POST_PATHS:
        handle = handler(path)
        for prefix in ("", CAPTURE_PREFIX):
            hot_route(app, "POST", prefix + path, handle, with_headers=True)
            app.add_api_route(
                prefix + path,
                _fastapi_post(handle),
                methods=["POST"],
                tags=["model"],
                summary=POST_SUMMARIES[path],
                **post_docs(path, shape, capture=bool(prefix)),
            )

    async def models() -> FastJSONResponse:
        return FastJSONResponse(service.models())

    async def retrieve(response_id: str) -> FastJSONResponse:
        return FastJSONResponse(service.retrieve(response_id))

    for prefix in ("", CAPTURE_PREFIX):
        for path, route in (("/v1/models", models), ("/v1/responses/{response_id}", retrieve)):
            app.add_api_route(
                prefix + path, route, methods=["GET"], tags=["model"], **get_docs(path, capture=bool(prefix))
            )

    # The session is read from the path, not declared: a malformed one is check_session's 400.
    @app.get(CAPTURE_PATH, tags=["model"], summary="The tokens captured for one session", **CAPTURE_DOCS)
    async def captures(request: Request) -> FastJSONResponse:
        return FastJSONResponse(service.captures.get(request.path_params["session"]))

    @app.delete(CAPTURE_PATH, tags=["model"], summary="Read and forget one capture session", **CAPTURE_DOCS)
    async def drop_captures(request: Request) -> FastJSONResponse:
        return FastJSONResponse(service.captures.pop(request.path_params["session"]))

    add_weights_routes(app, service, weights_auth)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        await service.aclose()

    app.router.lifespan_context = lifespan

    return app


def _fastapi_post(handle):
    async def route(request: Request):
        return await handle(dict(request.path_params), await request.body(), request.headers.raw)

    return route
