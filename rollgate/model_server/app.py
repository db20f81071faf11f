"""The model server's HTTP face: POST /v1/responses (JSON or SSE), GET /v1/models, plus the
shared /healthz and /metrics. Training mode per request: header `x-rollgate-training: 1` (or
metadata {"rollgate_training": "true"}, handled by the service)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from starlette.types import Send

from rollgate.core.app import FastJSONResponse, hot_route, make_app, parse_json
from rollgate.core.errors import BadRequest
from rollgate.core.metrics import Metrics
from rollgate.model_server import sse
from rollgate.model_server.service import TRUE, ModelService

TRAINING_HEADER = "x-rollgate-training"
_TRAINING_HEADER_RAW = TRAINING_HEADER.encode()


class EventStreamResponse(StreamingResponse):
    """SSE of Responses events. However the response ends (done, client gone, send failed), the
    event iterator is closed at once, so an abandoned generation leaves its batch slot now."""

    def __init__(self, events: AsyncIterator[dict[str, Any]]):
        self.events = events
        super().__init__(
            self._encode(),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )

    async def _encode(self) -> AsyncIterator[bytes]:
        async for event in self.events:
            yield sse.encode(event)

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.events.aclose()  # type: ignore[attr-defined]


def create_model_app(service: ModelService, metrics: Metrics | None = None) -> FastAPI:
    app = make_app(
        "Rollgate model server",
        component="model",
        registry=metrics.registry if metrics is not None else None,
        ready=service.ready,
    )
    app.state.service = service

    async def create(params: dict[str, str], raw: bytes, headers: list[tuple[bytes, bytes]]) -> Response:
        body = parse_json(raw, component="model")
        training = (
            next((v.decode("latin-1").lower() in TRUE for k, v in headers if k == _TRAINING_HEADER_RAW), False) or None
        )
        stream = isinstance(body, dict) and body.get("stream") is True
        if not stream:
            # Returning a Response skips FastAPI's jsonable_encoder walk over the reply.
            return FastJSONResponse(await service.create(body, training=training))
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object", component="model", field="body")
        # Validation happens before the first byte, so its errors keep their HTTP status.
        return EventStreamResponse(await service.stream(body, training=training))

    # The hot route serves a standalone model server; the FastAPI route (the same handler) serves
    # the gateway's embedded mount and documents the path in OpenAPI.
    hot_route(app, "POST", "/v1/responses", create, with_headers=True)

    @app.post("/v1/responses", tags=["model"])
    async def responses(request: Request):
        return await create({}, await request.body(), request.headers.raw)

    @app.get("/v1/models", tags=["model"])
    async def models():
        return service.models()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        await service.aclose()

    app.router.lifespan_context = lifespan

    return app
