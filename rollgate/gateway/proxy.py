"""The gateway's front door to the model pool and the environment replicas (distributed shape).

Requests are forwarded byte for byte (SSE streams too). Environment replicas are chosen round
robin per request: every replica of an environment shares the session store, so any one can
serve any session. A replica that refuses the connection is skipped for the next one; once the
request was sent it is never re-sent (a tool call must not run twice)."""

from __future__ import annotations

import logging
from urllib.parse import quote

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from rollgate.core.errors import NotFound, UpstreamError, UpstreamTimeout
from rollgate.core.replicas import ReplicaSet
from rollgate.gateway.api_docs import CAPTURES_DOCS, ENV_ROUTE_DOCS, model_route_docs
from rollgate.gateway.ws_relay import ws_relay
from rollgate.model_server.api_docs import ModelShape
from rollgate.model_server.capture import SESSION_HEADER

log = logging.getLogger("rollgate.proxy")
PATH_SAFE = "/:@!$&'()*+,;="  # RFC 3986 pchar delimiters: kept as they are

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

    async def forward(
        self, request: Request, replicas: ReplicaSet, path: str, *, component: str, pin: str | None = None
    ) -> Response:
        """`pin`: a key whose requests go to one replica while it is up (a capture session's
        tokens live in that model server's memory); others go round robin."""
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_REQUEST}
        headers.update(self._auth)
        query = request.url.query
        # `path` holds decoded path parameters: encode it again (control characters, spaces, ...)
        path = quote(path, safe=PATH_SAFE)
        last: Exception | None = None
        for base in replicas.order(pin):
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

    @property
    def auth_headers(self) -> dict[str, str]:
        """What the forwarder sends upstream to authenticate (the WebSocket relay sends it too)."""
        return dict(self._auth)

    async def aclose(self) -> None:
        await self._client.aclose()


def proxy_router(
    forwarder: Forwarder,
    *,
    model: ReplicaSet | None,
    envs: dict[str, ReplicaSet],
    shape: ModelShape | None = None,
) -> APIRouter:
    """`shape`: what the model pool serves, for the OpenAPI document (api_docs)."""
    r = APIRouter()
    shape = shape or ModelShape(("rollgate-tiny",))

    async def to_model(request: Request, path: str, pin: str | None = None) -> Response:
        if model is None:
            raise NotFound(
                "this gateway has no model server configured (settings.model_url)",
                component="gateway",
                field="model_url",
            )
        pin = pin or request.headers.get(SESSION_HEADER)
        return await forwarder.forward(request, model, path, component="model", pin=pin)

    # Each model route, at /v1/... and at /capture/{session}/v1/... (the session's calls pinned
    # to one model server, where its captured tokens are kept).
    for prefix in ("", "/capture/{session}"):
        for method, path, summary in MODEL_ROUTES:
            r.add_api_route(
                prefix + path,
                _model_route(to_model, path),
                methods=[method],
                tags=["model"],
                summary=summary,
                **model_route_docs(method, path, shape, capture=bool(prefix)),
            )

    @r.api_route(
        "/v1/captures/{session}",
        methods=["GET", "DELETE"],
        tags=["model"],
        summary="Tokens captured for one session (proxied to the model server holding it)",
        **CAPTURES_DOCS,
    )
    async def captures(request: Request) -> Response:
        session = request.path_params["session"]
        return await to_model(request, f"/v1/captures/{session}", pin=session)

    @r.api_route(
        "/envs/{target:path}",
        methods=["GET", "POST", "DELETE", "PUT", "PATCH"],
        tags=["envs"],
        summary="Resources-server routes of one environment (proxied to its replicas); "
        "a family member's name holds one '/', e.g. /envs/reasoning_gym/chain_sum/tools",
        **ENV_ROUTE_DOCS,
    )
    async def env_route(target: str, request: Request) -> Response:
        env, path = split_env_path(target, envs)
        return await forwarder.forward(request, envs[env], "/" + path, component=f"env:{env}")

    # WebSocket routes of the environments (OpenEnv's /envs/{env}/openenv/ws): gateway/ws_relay.py
    r.add_api_websocket_route("/envs/{target:path}", ws_relay(envs, split_env_path, headers=forwarder.auth_headers))
    return r


MODEL_ROUTES = (
    ("POST", "/v1/responses", "OpenAI Responses API (proxied to the model pool)"),
    ("POST", "/v1/chat/completions", "OpenAI Chat Completions API (proxied)"),
    ("POST", "/v1/messages", "Anthropic Messages API (proxied)"),
    ("GET", "/v1/responses/{response_id}", "A stored response (proxied)"),
    ("GET", "/v1/models", "Models served (proxied)"),
)


def _model_route(to_model, path: str):
    async def route(request: Request) -> Response:
        params = request.path_params
        session = params.get("session")
        upstream = path.replace("{response_id}", params.get("response_id", ""))
        if session is not None:
            upstream = f"/capture/{session}{upstream}"
        return await to_model(request, upstream, pin=session)

    return route


def split_env_path(target: str, envs: dict[str, ReplicaSet]) -> tuple[str, str]:
    """ "reasoning_gym/chain_sum/sessions" -> ("reasoning_gym/chain_sum", "sessions"): an environment
    name holds at most one "/" (family/member), and the longer known name wins."""
    parts = target.split("/")
    for k in (2, 1):
        name = "/".join(parts[:k])
        if len(parts) > k and name in envs:
            return name, "/".join(parts[k:])
    raise NotFound(
        f"unknown environment in /envs/{target}; this gateway serves {len(envs)}: see GET /v1/envs",
        component="gateway",
        field="env",
    )
