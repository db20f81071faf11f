"""The gateway's `POST /v1/weights`: one weight update, fanned out to every model replica at once.

The request is the model server's own (rollgate.model_server.weights: a checkpoint path or a
safetensors upload, and a version); the gateway checks it once, sends it to each replica (over
HTTP with the gateway's token, or in process in the embedded shape) and answers per replica:
whether it loaded the update, and which version it serves now. A replica that failed is named
with its error; one that could not be reached serves an unknown version (null). All loaded: 200.
Otherwise the answer is an error (every replica refused alike: their status, e.g. 400 for a shape
mismatch; anything else: 502) whose body also carries the per-replica results.
`GET /v1/weights` answers the version each replica serves."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel, Field

from rollgate.core.app import FastJSONResponse
from rollgate.core.errors import RollgateError, UpstreamError
from rollgate.core.http import NO_RETRY, HttpClient, Reply
from rollgate.core.openapi import ErrorBody, json_content, semantic_checks
from rollgate.core.schemas import ErrorKind
from rollgate.model_server.weights import (
    MAX_UPLOAD_BYTES,
    UPDATE_CHECKS,
    UPDATE_DOC,
    WEIGHTS_PATH,
    WeightsState,
    apply_update,
    current_state,
    parse_update,
)

log = logging.getLogger("rollgate.gateway.weights")

IN_PROCESS = "in-process"


class ReplicaWeights(BaseModel):
    replica: str = Field(description=f"the model server's URL ({IN_PROCESS!r} in the embedded shape)")
    ok: bool = Field(description="it loaded this update (GET: it answered)")
    status: int | None = Field(None, description="the HTTP status it answered (null: unreachable)")
    version: str | None = Field(None, description="the weight_version it serves now (null: unknown)")
    error: str | None = Field(None, description="why it failed")


class WeightsFanout(BaseModel):
    version: str | None = Field(description="the version asked for (GET: null)")
    ok: bool = Field(description="every replica loaded it")
    replicas: list[ReplicaWeights]


class WeightsFanoutError(BaseModel):
    """An error body (ErrorResponse) that also carries the per-replica results once the update
    was sent (a request the gateway refuses itself has the error alone)."""

    error: ErrorBody
    version: str | None = None
    ok: bool = False
    replicas: list[ReplicaWeights] | None = None


@dataclass(frozen=True)
class Update:
    """One update, checked once by the gateway: the raw request (forwarded as is) and its parts."""

    raw: bytes
    content_type: str
    version: str
    path: str | None
    tensors: bytes | None


class Replica(Protocol):
    name: str

    async def update(self, u: Update) -> ReplicaWeights: ...

    async def state(self) -> ReplicaWeights: ...

    async def aclose(self) -> None: ...


class LocalReplica:
    """The embedded shape's model service, in this process."""

    name = IN_PROCESS

    def __init__(self, service: Any):
        self.service = service
        self._lock = asyncio.Lock()

    async def update(self, u: Update) -> ReplicaWeights:
        try:
            async with self._lock:
                state = await apply_update(self.service.backend, u.version, u.path, u.tensors)
        except RollgateError as exc:
            return ReplicaWeights(
                replica=self.name, ok=False, status=exc.status, version=self._version(), error=exc.message
            )
        return ReplicaWeights(replica=self.name, ok=True, status=200, version=state.version)

    async def state(self) -> ReplicaWeights:
        return ReplicaWeights(replica=self.name, ok=True, status=200, version=self._version())

    def _version(self) -> str | None:
        return current_state(self.service.backend).version

    async def aclose(self) -> None:
        pass  # the service is the stack's to close


class HttpReplica:
    """A model server over HTTP (`rollgate serve --role model`), with the gateway's token."""

    def __init__(self, url: str, *, api_key: str | None, timeout_s: float = 900.0):
        self.name = url.rstrip("/")
        headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        # one try: an update must not be loaded twice, and a state read is cheap to ask again
        self.http = HttpClient(
            self.name, component="model", timeout_s=timeout_s, connect_timeout_s=5.0, headers=headers, retry=NO_RETRY
        )

    async def update(self, u: Update) -> ReplicaWeights:
        params = {"version": u.version} if u.tensors is not None else None
        headers = {"content-type": u.content_type or "application/json"}
        try:
            resp = await self.http.send("POST", WEIGHTS_PATH, data=u.raw, headers=headers, params=params)
        except UpstreamError as exc:
            return ReplicaWeights(replica=self.name, ok=False, error=f"unreachable: {exc.message}")
        if resp.status == 200:
            state = WeightsState.model_validate_json(resp.body)
            return ReplicaWeights(replica=self.name, ok=True, status=200, version=state.version)
        now = await self.state()  # what it serves after refusing: the old version, if it says so
        return ReplicaWeights(
            replica=self.name, ok=False, status=resp.status, version=now.version, error=_message(resp)
        )

    async def state(self) -> ReplicaWeights:
        try:
            resp = await self.http.send("GET", WEIGHTS_PATH)
        except UpstreamError as exc:
            return ReplicaWeights(replica=self.name, ok=False, error=f"unreachable: {exc.message}")
        if resp.status != 200:
            return ReplicaWeights(replica=self.name, ok=False, status=resp.status, error=_message(resp))
        return ReplicaWeights(
            replica=self.name, ok=True, status=200, version=WeightsState.model_validate_json(resp.body).version
        )

    async def aclose(self) -> None:
        await self.http.close()


def _message(resp: Reply) -> str:
    try:
        return str(resp.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {resp.status}: {resp.body[:300].decode(errors='replace')}"


def outcome(version: str, results: list[ReplicaWeights]) -> tuple[int, dict[str, Any]]:
    """(status, body) of a fan-out."""
    failed = [r for r in results if not r.ok]
    if not failed:
        return 200, WeightsFanout(version=version, ok=True, replicas=results).model_dump(mode="json")
    statuses = {r.status for r in failed}
    status = 502
    if len(failed) == len(results) and len(statuses) == 1:
        only = next(iter(statuses))
        if only is not None and 400 <= only < 500:
            status = int(only)  # type: ignore[arg-type]
    detail = "; ".join(f"{r.replica} ({r.status or 'unreachable'}): {r.error}" for r in failed)
    error = ErrorBody(
        kind=ErrorKind.bad_request if status < 500 else ErrorKind.upstream,
        component="gateway",
        field="replicas",
        message=f"{len(failed)} of {len(results)} model replicas did not load version {version!r}: {detail}",
    )
    body = WeightsFanoutError(error=error, version=version, replicas=results).model_dump(mode="json")
    body["error"] = error.model_dump(mode="json", exclude_none=True)  # the shape of every error body
    return status, body


class WeightsFanoutRoutes:
    def __init__(self, replicas: list[Replica]):
        if not replicas:
            raise ValueError("a weights fan-out needs at least one model replica")
        self.replicas = replicas

    async def update(self, raw: bytes, content_type: str, query_version: str | None) -> tuple[int, dict[str, Any]]:
        # Checked once here, so a malformed request is one 400, not one per replica.
        version, path, tensors = parse_update(raw, content_type, query_version)
        u = Update(raw, content_type, version, path, tensors)
        results = await asyncio.gather(*(r.update(u) for r in self.replicas))
        status, body = outcome(version, list(results))
        served = ", ".join(f"{r.replica}={r.version}" for r in results)
        (log.info if status == 200 else log.warning)("weights %s: %d (%s)", version, status, served)
        return status, body

    async def states(self) -> dict[str, Any]:
        results = list(await asyncio.gather(*(r.state() for r in self.replicas)))
        return WeightsFanout(version=None, ok=all(r.ok for r in results), replicas=results).model_dump(mode="json")

    async def aclose(self) -> None:
        for r in self.replicas:
            await r.aclose()

    def router(self) -> APIRouter:
        router = APIRouter()

        @router.post(
            WEIGHTS_PATH,
            tags=["model"],
            summary="Load new weights into every model replica (fan-out); answers per replica",
            response_model=WeightsFanout,
            responses={
                400: json_content(
                    WeightsFanoutError,
                    "Every replica refused it alike, e.g. a shape mismatch or a backend that cannot load weights "
                    "this way (or the gateway refused a malformed request)",
                ),
                502: json_content(WeightsFanoutError, "Some replicas failed or could not be reached (named)"),
            },
            openapi_extra={
                **UPDATE_DOC,
                **semantic_checks(
                    *UPDATE_CHECKS, ("replicas", "every model replica refused the update alike (named, with why)")
                ),
            },
        )
        async def update(request: Request):
            status, body = await self.update(
                await request.body(), request.headers.get("content-type", ""), request.query_params.get("version")
            )
            return FastJSONResponse(body, status_code=status)

        @router.get(
            WEIGHTS_PATH,
            tags=["model"],
            summary="The weight version each model replica serves",
            response_model=WeightsFanout,
        )
        async def states():
            return FastJSONResponse(await self.states())

        return router

    def install(self, app: FastAPI) -> None:
        app.include_router(self.router())
        app.state.body_limits[WEIGHTS_PATH] = MAX_UPLOAD_BYTES


def http_fanout(urls: list[str], *, api_key: str | None, timeout_s: float = 900.0) -> WeightsFanoutRoutes:
    """Every model server in `urls`; a checkpoint of a large model takes a while to load."""
    urls = list(dict.fromkeys(u.rstrip("/") for u in urls))
    return WeightsFanoutRoutes([HttpReplica(u, api_key=api_key, timeout_s=timeout_s) for u in urls])
