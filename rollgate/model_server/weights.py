"""Weight updates of a running model server: `POST /v1/weights` loads new weights with a version
that every later generation carries (`weight_version` on each turn); `GET /v1/weights` says which
version is served. A trainer pushes its policy here after each optimizer step.

Two ways to send weights:
- JSON `{"version": "step-3", "path": "/ckpt/step-3"}`: a directory written by `save_pretrained`
  (its *.safetensors files), read by the server, so the path is on the server's disk;
- `application/octet-stream`: safetensors bytes (`safetensors.torch.save(state_dict)`), with the
  version in the query (`POST /v1/weights?version=step-3`). A subset of the tensors is fine (a
  trainer may send only what it trains); a checkpoint directory must hold them all.
A version alone (`{"version": ...}`) is for a backend that holds no weights (scripted).

Atomic: everything is read, checked (every name known, every shape and dtype equal to the served
tensor's) and staged on the model's device before the engine is paused; then the tensors are
copied in between two decode steps and the version is bumped. A bad update is a 400 naming the
tensor and both shapes, and the old weights and version go on serving: never a half-loaded model.

vLLM offers comparable routes only in its development mode (`/collective_rpc` to reload from a
path, `/update_weights` over NCCL or CUDA IPC, `/weight_info`). Rollgate's route is versioned like
its other APIs and takes one body on every backend: local (path or tensors), scripted (a version
only), vllm (a path, which each upstream reloads in place), openai (none). What a backend cannot do is
a 400 with error.code `not_supported`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rollgate.core.app import FastJSONResponse, parse_json
from rollgate.core.errors import BadRequest, Unauthorized, field_error
from rollgate.core.openapi import error_response, inline_schema, semantic_checks
from rollgate.model_server.backend import (
    Backend,
    InProcessWeights,
    PassthroughBackend,
    ReloadableWeights,
    Versioned,
    VersionOnlyWeights,
)

log = logging.getLogger("rollgate.model_server.weights")

COMPONENT = "model"
WEIGHTS_PATH = "/v1/weights"
TENSORS_TYPE = "application/octet-stream"
# An upload carries a whole model; checkpoints on the server's disk are the way for large ones.
MAX_UPLOAD_BYTES = 4 * 1024**3


class NotSupported(BadRequest):
    """The backend cannot do what was asked: a 400 with code `not_supported` (not a 5xx: the
    server works, the request asks for what this backend cannot do); nothing was changed."""

    code = "not_supported"


class WeightsUpdate(BaseModel):
    """The JSON form of an update: a checkpoint directory on the server's disk, or a version alone."""

    model_config = ConfigDict(extra="forbid")
    version: str = Field(min_length=1, max_length=200, description="stamped on every later turn (weight_version)")
    path: str | None = Field(
        None, min_length=1, description="a directory written by save_pretrained (*.safetensors), read by the server"
    )


class WeightsState(BaseModel):
    """What a model server serves now (and, after an update, how it got there)."""

    version: str | None = Field(description="the weight_version stamped on what it generates next")
    backend: str
    source: Literal["path", "tensors", "version"] | None = Field(None, description="how the update came")
    tensors: int | None = Field(None, description="tensors loaded by the update")
    seconds: float | None = Field(None, description="how long the update took")


def parse_update(raw: bytes, content_type: str, query_version: str | None) -> tuple[str, str | None, bytes | None]:
    """(version, path, tensor bytes) of a request; a bad field is a 400 naming it."""
    if content_type.split(";")[0].strip().lower() == TENSORS_TYPE:
        if not query_version:
            raise BadRequest(
                "an upload of tensors needs its version in the query: POST /v1/weights?version=...",
                component=COMPONENT,
                field="version",
            )
        if len(query_version) > 200:
            raise BadRequest("version: at most 200 characters", component=COMPONENT, field="version")
        if not raw:
            raise BadRequest("the upload is empty: send safetensors bytes", component=COMPONENT, field="body")
        return query_version, None, raw
    body = parse_json(raw, component=COMPONENT)
    try:
        update = WeightsUpdate.model_validate(body)
    except ValidationError as exc:
        raise field_error(exc, component=COMPONENT) from None
    if query_version is not None and query_version != update.version:
        raise BadRequest("version is given twice, and differently", component=COMPONENT, field="version")
    return update.version, update.path, None


# --- reading and checking tensors -------------------------------------------------------------


def read_checkpoint(path: str) -> dict[str, Any]:
    """Every tensor of a `save_pretrained` directory (its *.safetensors files)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    d = Path(path)
    if not d.is_dir():
        raise BadRequest(f"path {path!r} is not a directory this server can read", component=COMPONENT, field="path")
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise BadRequest(
            f"path {path!r} holds no *.safetensors files (write the checkpoint with save_pretrained)",
            component=COMPONENT,
            field="path",
        )
    out: dict[str, Any] = {}
    for f in files:
        try:
            out.update(load_file(str(f)))
        except (SafetensorError, OSError) as exc:
            raise BadRequest(f"{f.name} in {path!r} is unreadable: {exc}", component=COMPONENT, field="path") from None
    return out


def parse_tensors(raw: bytes) -> dict[str, Any]:
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        tensors = load(raw)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise BadRequest(f"the body is not safetensors bytes: {exc}", component=COMPONENT, field="body") from None
    if not tensors:
        raise BadRequest("the upload holds no tensors", component=COMPONENT, field="body")
    return tensors


def stage(model: Any, tensors: Mapping[str, Any], *, complete: bool) -> dict[str, Any]:
    """Check `tensors` against the served model and place them on its device. Every name must be
    one of the model's; shapes and dtypes must match. `complete`: every tensor of the model must
    be given (tied ones, which share storage, count once)."""
    served = model.state_dict()
    for name in sorted(tensors):
        if name not in served:
            raise BadRequest(
                f"tensor {name} is not one of the served model's {len(served)} tensors",
                component=COMPONENT,
                field=f"tensors.{name}",
            )
        new, cur = tensors[name], served[name]
        if tuple(new.shape) != tuple(cur.shape):
            raise BadRequest(
                f"tensor {name}: shape {list(new.shape)} does not match the served model's {list(cur.shape)}",
                component=COMPONENT,
                field=f"tensors.{name}",
            )
        if new.dtype != cur.dtype:
            raise BadRequest(
                f"tensor {name}: dtype {str(new.dtype).removeprefix('torch.')} does not match the served "
                f"model's {str(cur.dtype).removeprefix('torch.')}",
                component=COMPONENT,
                field=f"tensors.{name}",
            )
    if complete:
        groups: dict[int, list[str]] = {}
        for name, t in served.items():
            groups.setdefault(t.untyped_storage().data_ptr(), []).append(name)
        missing = sorted(g[0] for g in groups.values() if not any(n in tensors for n in g))
        if missing:
            raise BadRequest(
                f"the checkpoint lacks {len(missing)} of the served model's tensors, e.g. {missing[0]}",
                component=COMPONENT,
                field="path",
            )
    # Allocation happens here, before the engine is paused: the copy itself cannot fail.
    return {name: t.to(served[name].device).contiguous() for name, t in tensors.items()}


# --- applying an update to a backend ----------------------------------------------------------


async def apply_update(
    backend: Backend | PassthroughBackend, version: str, path: str | None, raw: bytes | None
) -> WeightsState:
    """Load an update into `backend`, or raise (a 400 naming the field) leaving it as it was."""
    name = backend.name
    started = time.perf_counter()
    if path is None and raw is None:
        if not isinstance(backend, VersionOnlyWeights):
            raise BadRequest(
                f"the {name} backend serves real weights: give `path` (JSON) or upload tensors with the version",
                component=COMPONENT,
                field="path",
            )
        backend.set_weight_version(version)
        return WeightsState(version=version, backend=name, source="version", tensors=0, seconds=_since(started))
    if isinstance(backend, InProcessWeights):
        tensors = await asyncio.to_thread(read_checkpoint, path) if path is not None else parse_tensors(raw or b"")
        staged = await asyncio.to_thread(stage, backend.model, tensors, complete=path is not None)
        await asyncio.to_thread(backend.load_weights, staged, version)
        source = "path" if path is not None else "tensors"
        return WeightsState(version=version, backend=name, source=source, tensors=len(staged), seconds=_since(started))
    if isinstance(backend, ReloadableWeights):
        if path is None:
            raise NotSupported(
                f"the {name} backend cannot take uploaded tensors: its upstream servers load weights from a "
                'checkpoint directory they can read; send {"version": ..., "path": ...}',
                component=COMPONENT,
                field="body",
            )
        await backend.reload_weights(path, version)
        return WeightsState(version=version, backend=name, source="path", seconds=_since(started))
    if isinstance(backend, VersionOnlyWeights):
        raise NotSupported(
            f'the {name} backend holds no weights to load: send the version alone, {{"version": ...}}',
            component=COMPONENT,
            field="path" if path is not None else "body",
        )
    raise NotSupported(f"the {name} backend cannot load weights", component=COMPONENT, field="backend")


def current_state(backend: Backend | PassthroughBackend) -> WeightsState:
    version = backend.weight_version if isinstance(backend, Versioned) else None
    return WeightsState(version=version, backend=backend.name)


def _since(t0: float) -> float:
    return round(time.perf_counter() - t0, 4)


# --- the routes -------------------------------------------------------------------------------

# What a schema cannot say about an update (the bytes must be safetensors of the served model's
# tensors; a path must be a readable checkpoint): a schema-valid request may still be a 400 here.
UPDATE_CHECKS = (
    ("body", "safetensors bytes (application/octet-stream), or a JSON update"),
    ("version", "uploaded tensors carry their version in the query"),
    (
        "path",
        "a save_pretrained directory this server can read, with every tensor of the served model; "
        "a backend that serves real weights needs a path or tensors, one with none takes a version only",
    ),
)
UPDATE_DOC = {
    **semantic_checks(*UPDATE_CHECKS),
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": inline_schema(WeightsUpdate)},
            TENSORS_TYPE: {"schema": {"type": "string", "format": "binary", "description": "safetensors bytes"}},
        },
    },
    "parameters": [
        {
            "name": "version",
            "in": "query",
            "required": False,
            "description": "the version of uploaded tensors (required with application/octet-stream)",
            "schema": {"type": "string", "minLength": 1, "maxLength": 200},
        }
    ],
}
_UPDATE_ERRORS = {
    400: error_response(
        400,
        "A field is wrong (error.field), e.g. a tensor whose shape or dtype differs; or the backend cannot load "
        "weights this way (error.code not_supported). Nothing changed",
    ),
    401: error_response(401, "Missing or wrong bearer token (weight updates always need one when auth is on)"),
}


class AdminAuth:
    """Who may change the weights: the bearer token of the model server's settings. With auth on
    and no token configured, updates are refused: loading weights is a privileged operation."""

    def __init__(self, api_key: str | None, *, enabled: bool):
        self.api_key = api_key
        self.enabled = enabled

    def check(self, authorization: str | None) -> None:
        import hmac

        if not self.enabled:
            return
        if not self.api_key:
            raise Unauthorized(
                "weight updates need the model server's API token: set ROLLGATE_API_KEY on it "
                "(or switch auth off with --no-auth)",
                component=COMPONENT,
                field="authorization",
            )
        if authorization is None or not hmac.compare_digest(authorization.encode(), f"Bearer {self.api_key}".encode()):
            raise Unauthorized("missing or wrong bearer token", component=COMPONENT, field="authorization")


def weights_router(service: Any, auth: AdminAuth | None = None) -> APIRouter:
    """POST and GET /v1/weights over `service.backend`. `auth` guards the POST (reading the version
    is open, like /v1/models); None: the app's own auth applies (the embedded gateway), or none."""
    router = APIRouter()
    lock = asyncio.Lock()  # one update at a time

    @router.post(
        WEIGHTS_PATH,
        tags=["model"],
        summary="Load new weights (checkpoint path or safetensors upload) and a version; atomic",
        response_model=WeightsState,
        responses=_UPDATE_ERRORS,
        openapi_extra=UPDATE_DOC,
    )
    async def update(request: Request):
        if auth is not None:
            auth.check(request.headers.get("authorization"))
        version, path, raw = parse_update(
            await request.body(), request.headers.get("content-type", ""), request.query_params.get("version")
        )
        async with lock:
            state = await apply_update(service.backend, version, path, raw)
        log.info("weights: now serving version %s (%s, %s tensors)", state.version, state.source, state.tensors)
        return FastJSONResponse(state.model_dump(mode="json"))

    @router.get(
        WEIGHTS_PATH,
        tags=["model"],
        summary="The weight version served now",
        response_model=WeightsState,
    )
    async def info():
        return FastJSONResponse(current_state(service.backend).model_dump(mode="json"))

    return router


def add_weights_routes(app: FastAPI, service: Any, auth: AdminAuth | None = None) -> None:
    app.include_router(weights_router(service, auth))
    app.state.body_limits[WEIGHTS_PATH] = MAX_UPLOAD_BYTES
