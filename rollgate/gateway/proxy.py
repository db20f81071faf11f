"""The gateway's front door to the model pool and the environment replicas (distributed shape).

Requests are forwarded byte for byte (SSE streams too). Environment replicas are chosen round
robin per request: every replica of an environment shares the session store, so any one can
serve any session. A replica that refuses the connection is skipped for the next one; once the
request was sent it is never re-sent (a tool call must not run twice)."""

from __future__ import annotations

import logging

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from rollgate.core.errors import NotFound, UpstreamError, UpstreamTimeout
from rollgate.gateway.replicas import ReplicaSet

log = logging.getLogger("rollgate.proxy")

# Hop-by-hop headers and ours: never forwarded.
_DROP_REQUEST = {
    "host",
    "authorization",
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "upgrade",
    "proxy-authorization",
    "accept-encoding",
}
_DROP_RESPONSE = {"content-length", "connection", "keep-alive", "transfer-encoding", "content-encoding"}


class Forwarder:
    def __init__(self, *, api_key: str | None = None, timeout_s: float = 300.0, connect_timeout_s: float = 5.0):
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200),
        )
        self._auth = {"authorization": f"Bearer {api_key}"} if api_key else {}

    async def forward(self, request: Request, replicas: ReplicaSet, path: str, *, component: str) -> Response:
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_REQUEST}
        headers.update(self._auth)
        query = request.url.query
        last: Exception | None = None
        for base in replicas.order():
            url = f"{base}{path}" + (f"?{query}" if query else "")
            upstream = self._client.build_request(request.method, url, content=body, headers=headers)
            try:
                resp = await self._client.send(upstream, stream=True)
            except httpx.ConnectError as exc:  # nothing was sent: the next replica may take it
                log.warning("%s replica %s refused the connection: %s", component, base, exc)
                last = exc
                continue
            except httpx.TimeoutException:
                raise UpstreamTimeout(f"{request.method} {path} on {base} timed out", component=component) from None
            except httpx.HTTPError as exc:
                raise UpstreamError(
                    f"{request.method} {path} on {base} failed: {exc}", component=component, transient=True
                ) from None
            out_headers = {k: v for k, v in resp.headers.items() if k.lower() not in _DROP_RESPONSE}
            if resp.headers.get("content-type", "").startswith("text/event-stream"):
                return StreamingResponse(
                    resp.aiter_raw(),
                    status_code=resp.status_code,
                    headers=out_headers,
                    background=BackgroundTask(resp.aclose),
                )
            try:
                content = await resp.aread()
            except httpx.HTTPError as exc:
                raise UpstreamError(
                    f"{request.method} {path} on {base} broke off: {exc}", component=component, transient=True
                ) from None
            finally:
                await resp.aclose()
            return Response(content, status_code=resp.status_code, headers=out_headers)
        raise UpstreamError(
            f"no {component} replica reachable ({', '.join(replicas.urls)}): {last}",
            component=component,
            transient=True,
        )

    async def aclose(self) -> None:
        await self._client.aclose()


def proxy_router(forwarder: Forwarder, *, model: ReplicaSet | None, envs: dict[str, ReplicaSet]) -> APIRouter:
    r = APIRouter()

    async def to_model(request: Request, path: str) -> Response:
        if model is None:
            raise NotFound(
                "this gateway has no model server configured (settings.model_url)",
                component="gateway",
                field="model_url",
            )
        return await forwarder.forward(request, model, path, component="model")

    @r.post("/v1/responses", tags=["model"], summary="OpenAI Responses API (proxied to the model pool)")
    async def responses(request: Request) -> Response:
        return await to_model(request, "/v1/responses")

    @r.get("/v1/models", tags=["model"], summary="Models served (proxied)")
    async def models(request: Request) -> Response:
        return await to_model(request, "/v1/models")

    @r.api_route(
        "/envs/{env}/{path:path}",
        methods=["GET", "POST", "DELETE", "PUT", "PATCH"],
        tags=["envs"],
        summary="Resources-server routes of one environment (proxied to its replicas)",
    )
    async def env_route(env: str, path: str, request: Request) -> Response:
        replicas = envs.get(env)
        if replicas is None:
            raise NotFound(
                f"unknown environment {env!r}; this gateway serves: {', '.join(sorted(envs)) or 'none'}",
                component="gateway",
                field="env",
            )
        return await forwarder.forward(request, replicas, "/" + path, component=f"env:{env}")

    return r
