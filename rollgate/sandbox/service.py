"""The sandbox service (`rollgate serve --role sandbox`): the local provider behind a small,
authenticated HTTP API, so that a deployment runs model-written code in one dedicated container
that has the privileges namespaces need and holds no other secret (docs/sandbox.md).

    POST   /v1/sandboxes                      -> {id, workdir}
    POST   /v1/sandboxes/{id}/exec            {cmd | code, stdin?, stdin_b64?, timeout_s?} -> ExecResult
    PUT    /v1/sandboxes/{id}/files?path=P    raw body -> 204
    GET    /v1/sandboxes/{id}/files?path=P    -> raw bytes (max_bytes=N caps it)
    DELETE /v1/sandboxes/{id}                 -> 204
    GET    /v1/capabilities                   -> what this host isolates

Every route but /healthz and /metrics needs `Authorization: Bearer <sandbox.token>`. The service
refuses to start without a token, and without isolation unless `sandbox.allow_unisolated` is set.
Sandboxes nobody touched for `idle_ttl_s` are destroyed, so a client that died leaks nothing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from rollgate.core.app import make_app
from rollgate.core.auth import require_bearer
from rollgate.core.errors import BadRequest, CapacityError, NotFound
from rollgate.core.metrics import Metrics
from rollgate.core.openapi import errors, link, semantic_checks
from rollgate.core.settings import Settings
from rollgate.sandbox.base import ExecResult, Sandbox, SandboxProvider

log = logging.getLogger(__name__)

COMPONENT = "sandbox"
OPEN_PATHS = ("/healthz", "/metrics")
OCTETS = "application/octet-stream"
RAW_BODY = {"requestBody": {"required": True, "content": {OCTETS: {"schema": {"type": "string", "format": "binary"}}}}}
_ID = {"sandbox_id": "$response.body#/id"}
SANDBOX_LINKS = {
    "exec": link("/v1/sandboxes/{sandbox_id}/exec", "post", **_ID),
    "write": link("/v1/sandboxes/{sandbox_id}/files", "put", **_ID),
    "read": link("/v1/sandboxes/{sandbox_id}/files", "get", **_ID),
    "destroy": link("/v1/sandboxes/{sandbox_id}", "delete", **_ID),
}
PATH_CHECK = semantic_checks(("path", "relative to the work dir, without '..' (rollgate.sandbox.files)"))


# base64 as b64decode(validate=True) takes it: the alphabet, padded to whole quanta
BASE64 = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
_NO_NUL = "^[^\\x00]*$"
# check_exec_args: exactly one of cmd / code; argv is non-empty, without NUL bytes
_ONE_OF = {
    "oneOf": [
        {"required": ["cmd"], "properties": {"cmd": {"type": "array"}}},
        {"required": ["code"], "properties": {"code": {"type": "string"}}},
    ]
}


class ExecRequest(BaseModel):
    model_config = ConfigDict(strict=True, json_schema_extra=_ONE_OF)  # strict: no "5" for 5 seconds
    cmd: list[Annotated[str, Field(pattern=_NO_NUL)]] | None = Field(
        None, min_length=1, description="argv to run (exactly one of cmd / code)"
    )
    code: str | None = Field(None, description="Python source to run")
    stdin: str = ""
    stdin_b64: str | None = Field(None, pattern=BASE64, description="binary standard input, base64 (instead of stdin)")
    timeout_s: float | None = Field(None, gt=0, le=3600)


class Created(BaseModel):
    id: str
    workdir: str | None = None


class SandboxTable:
    """The live sandboxes of this service, with a cap and an idle reaper."""

    def __init__(self, provider: SandboxProvider, *, max_sandboxes: int, idle_ttl_s: float):
        self.provider = provider
        self.max_sandboxes = max_sandboxes
        self.idle_ttl_s = idle_ttl_s
        self._live: dict[str, tuple[Sandbox, float]] = {}
        self._reaper: asyncio.Task | None = None

    def __len__(self) -> int:
        return len(self._live)

    async def create(self) -> Sandbox:
        if len(self._live) >= self.max_sandboxes:
            raise CapacityError(
                f"{self.max_sandboxes} sandboxes are open; destroy some or raise max_sandboxes",
                component=COMPONENT,
                retry_after_s=1.0,
            )
        sandbox = await self.provider.create()
        self._live[sandbox.id] = (sandbox, time.monotonic())
        return sandbox

    def get(self, sandbox_id: str) -> Sandbox:
        entry = self._live.get(sandbox_id)
        if entry is None:
            raise NotFound(f"no sandbox {sandbox_id!r} (destroyed or expired)", component=COMPONENT, field="id")
        self._live[sandbox_id] = (entry[0], time.monotonic())
        return entry[0]

    async def destroy(self, sandbox_id: str) -> None:
        entry = self._live.pop(sandbox_id, None)
        if entry is not None:
            await entry[0].destroy()

    async def reap(self) -> int:
        cutoff = time.monotonic() - self.idle_ttl_s
        stale = [sid for sid, (_, seen) in self._live.items() if seen < cutoff]
        for sid in stale:
            log.warning("sandbox %s idle for %.0fs: destroyed", sid, self.idle_ttl_s)
            await self.destroy(sid)
        return len(stale)

    def start(self) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(max(1.0, self.idle_ttl_s / 4))
                with contextlib.suppress(Exception):
                    await self.reap()

        self._reaper = asyncio.get_running_loop().create_task(loop(), name="sandbox-reaper")

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for sid in list(self._live):
            await self.destroy(sid)
        await self.provider.close()


def isolated(caps: dict[str, Any]) -> bool:
    """Whether a provider's capabilities say model code runs without network access to the host
    and without the host's files (a provider that reports no private root is not isolated)."""
    return caps.get("network_isolated") not in (False, None) and caps.get("private_root") is not False


def create_sandbox_app(
    provider: SandboxProvider,
    *,
    token: str,
    metrics: Metrics | None = None,
    max_sandboxes: int = 256,
    idle_ttl_s: float = 600.0,
) -> FastAPI:
    if not token:
        raise ValueError("token: the sandbox service needs a bearer token")
    metrics = metrics or Metrics()
    table = SandboxTable(provider, max_sandboxes=max_sandboxes, idle_ttl_s=idle_ttl_s)
    app = make_app("Rollgate sandbox", component=COMPONENT, registry=metrics.registry)
    require_bearer(app, token, component=COMPONENT, open_paths=OPEN_PATHS, open_prefixes=())
    app.state.sandboxes = table

    @app.on_event("startup")
    async def _start() -> None:
        table.start()

    @app.on_event("shutdown")
    async def _stop() -> None:
        await table.close()

    @app.get("/v1/capabilities", summary="What this host isolates")
    async def capabilities() -> dict[str, Any]:
        caps = provider.capabilities()
        return {**caps, "isolated": isolated(caps), "open_sandboxes": len(table)}

    @app.post(
        "/v1/sandboxes",
        response_model=Created,
        summary="Create a sandbox",
        responses={200: {"description": "Created", "links": SANDBOX_LINKS}, **errors(503)},
    )
    async def create() -> Created:
        sandbox = await table.create()
        return Created(id=sandbox.id, workdir=getattr(sandbox, "workdir", None))

    @app.post(
        "/v1/sandboxes/{sandbox_id}/exec",
        response_model=ExecResult,
        summary="Run a command or Python source in a sandbox",
        responses=errors(400, 404),
    )
    async def exec_(sandbox_id: str, body: ExecRequest) -> ExecResult:
        sandbox = table.get(sandbox_id)
        stdin: str | bytes = body.stdin
        if body.stdin_b64 is not None:
            try:
                stdin = base64.b64decode(body.stdin_b64, validate=True)
            except ValueError:
                raise BadRequest("stdin_b64 is not valid base64", component=COMPONENT, field="stdin_b64") from None
        return await sandbox.exec(body.cmd, code=body.code, stdin=stdin, timeout_s=body.timeout_s)

    @app.put(
        "/v1/sandboxes/{sandbox_id}/files",
        status_code=204,
        summary="Write a file (the raw body) in a sandbox's work dir",
        responses={204: {"description": "Written"}, **errors(400, 404)},
        openapi_extra={**RAW_BODY, **PATH_CHECK},
    )
    async def write_file(sandbox_id: str, request: Request, path: str = Query(..., min_length=1)) -> Response:
        await table.get(sandbox_id).write_file(path, await request.body())
        return Response(status_code=204)

    @app.get(
        "/v1/sandboxes/{sandbox_id}/files",
        summary="Read a file of a sandbox's work dir",
        response_class=Response,
        responses={200: {"content": {OCTETS: {"schema": {"type": "string", "format": "binary"}}}}, **errors(400, 404)},
        openapi_extra=PATH_CHECK,
    )
    async def read_file(
        sandbox_id: str, path: str = Query(..., min_length=1), max_bytes: int | None = Query(None, ge=1)
    ) -> Response:
        data = await table.get(sandbox_id).read_file(path, max_bytes)
        return Response(data, media_type=OCTETS)

    @app.delete(
        "/v1/sandboxes/{sandbox_id}",
        status_code=204,
        summary="Destroy a sandbox (also when it is already gone)",
        responses={204: {"description": "Destroyed"}},
    )
    async def destroy(sandbox_id: str) -> Response:
        await table.destroy(sandbox_id)
        return Response(status_code=204)

    return app


def build_app(settings: Settings) -> FastAPI:
    """Role sandbox: the local provider of this host, refusing to run code it cannot isolate."""
    from rollgate.sandbox.local import LocalProvider

    sb = settings.sandbox
    if not sb.token:
        raise SystemExit(
            "rollgate serve --role sandbox needs a token: set ROLLGATE_SANDBOX__TOKEN (sandbox.token), the same "
            "value the code environment's resources service uses to call it"
        )
    options = {k: v for k, v in sb.options.items() if k not in ("max_sandboxes", "idle_ttl_s")}
    metrics = Metrics()
    provider = LocalProvider(**options, require_isolation=not sb.allow_unisolated, metrics=metrics)
    return create_sandbox_app(
        provider,
        token=sb.token,
        metrics=metrics,
        max_sandboxes=int(sb.options.get("max_sandboxes", 256)),
        idle_ttl_s=float(sb.options.get("idle_ttl_s", 600.0)),
    )
