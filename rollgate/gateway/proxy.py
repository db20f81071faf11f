"""The gateway's front door to the model pool and the environment replicas (distributed shape).

Requests are forwarded byte for byte (SSE streams too). Environment replicas are chosen round
robin per request: every replica of an environment shares the session store, so any one can
serve any session. A replica that refuses the connection is skipped for the next one; once the
request was sent it is never re-sent (a tool call must not run twice)."""

from __future__ import annotations

import logging
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from rollgate.core.errors import NotFound, UpstreamError
from rollgate.core.http import NO_RETRY, HttpClient
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
_DROP_RESPONSE = {b"content-length", b"connection", b"keep-alive", b"transfer-encoding", b"content-encoding"}


class Forwarder:
    """One pooled client per upstream replica (core.http), created on its first request."""

    def __init__(self, *, api_key: str | None = None, timeout_s: float = 300.0, connect_timeout_s: float = 5.0):
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._auth = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._clients: dict[tuple[str, str], HttpClient] = {}

    def _client(self, base: str, component: str) -> HttpClient:
        client = self._clients.get((base, component))
        if client is None:
            client = self._clients[(base, component)] = HttpClient(
                base,
                component=component,
                timeout_s=self.timeout_s,  # each wait for data: an SSE stream lasts as long as it sends
                connect_timeout_s=self.connect_timeout_s,
                retry=NO_RETRY,  # failover below, and never a re-send (a tool call must not run twice)
                headers=self._auth,
                content_type=None,  # the caller's, or none
                limit=1000,
            )
        return client

    async def forward(
        self, request: Request, replicas: ReplicaSet, path: str, *, component: str, pin: str | None = None
    ) -> Response:
        """`pin`: a key whose requests go to one replica while it is up (a capture session's
        tokens live in that model server's memory); others go round robin."""
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_REQUEST}
        query = request.url.query
        # `path` holds decoded path parameters: encode it again (control characters, spaces, ...)
        path = quote(path, safe=PATH_SAFE) + (f"?{query}" if query else "")
        last: UpstreamError | None = None
        for base in replicas.order(pin):
            try:
                resp = await self._client(base, component).open(
                    request.method, path, data=body or None, headers=headers
                )
            except UpstreamError as exc:
                if not getattr(exc, "not_sent", False):
                    raise
                log.warning("%s replica %s refused the connection: %s", component, base, exc.message)
                last = exc  # nothing was sent: the next replica may take it
                continue
            relayed = [(k.lower(), v) for k, v in resp.raw_headers if k.lower() not in _DROP_RESPONSE]
            if resp.headers.get("content-type", "").startswith("text/event-stream"):
                out: Response = StreamingResponse(
                    resp.chunks(), status_code=resp.status, background=BackgroundTask(resp.aclose)
                )
            else:
                try:
                    out = Response(await resp.read(), status_code=resp.status)
                finally:
                    await resp.aclose()
            out.raw_headers.extend(relayed)  # as the upstream sent them, repeated ones included
            return out
        raise UpstreamError(
            f"no {component} replica reachable ({', '.join(replicas.urls)}): {last.message if last else ''}",
            component=component,
            transient=True,
        )

    @property
    def auth_headers(self) -> dict[str, str]:
        """What the forwarder sends upstream to authenticate (the WebSocket relay sends it too)."""
        return dict(self._auth)

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()


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
