"""The model routes of the embedded shape: every model API (/v1/responses, /v1/chat/completions,
/v1/messages; JSON and SSE), GET /v1/responses/{id}, /v1/models and the capture routes over the
in-process service. They are the model server's own routes (one implementation of each API,
training-mode and capture-session handling included), lifted out of its app onto the embedded
one."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.routing import APIRoute


def model_paths() -> tuple[str, ...]:
    from rollgate.model_server.app import CAPTURE_PATH, CAPTURE_PREFIX, GET_PATHS, POST_PATHS

    plain = (*POST_PATHS, *GET_PATHS)
    return (*plain, *(CAPTURE_PREFIX + p for p in plain), CAPTURE_PATH)


def model_router(service: Any) -> APIRouter:
    from rollgate.model_server.app import create_model_app

    source = create_model_app(service)
    paths = set(model_paths())
    router = APIRouter()
    for route in source.router.routes:
        if isinstance(route, APIRoute) and route.path in paths:
            router.routes.append(route)
    missing = paths - {r.path for r in router.routes}  # type: ignore[attr-defined]
    if missing:
        raise RuntimeError(f"the model server app no longer serves {sorted(missing)}")
    return router
