"""HTTP face of a resources server (docs/architecture.md "Contracts"), plus NeMo Gym's routes.

Native routes: GET /tools, POST /sessions, POST /sessions/{id}/tools/{name},
POST /sessions/{id}/verify, DELETE /sessions/{id}.
NeMo Gym routes: POST /seed_session, POST /<tool>, POST /verify; the session travels in the
`rollgate_session` cookie (what NeMo Gym's agents send back) or the `x-session-id` header.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from fastapi import APIRouter, FastAPI, Path, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from rollgate.core.app import FastJSONResponse, hot_route, make_app, parse_json, read_json
from rollgate.core.errors import BadRequest
from rollgate.core.items import response_text
from rollgate.core.schemas import RoleView, VerifyRequest
from rollgate.resources_servers import api_docs
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.interop.mcp_server import MCP_METHODS, MCP_PATH, MCPSessionEndpoint
from rollgate.resources_servers.interop.openenv_serve import OPENENV_PATH, OpenEnvFace

SESSION_COOKIE = "rollgate_session"


def _json(model: BaseModel) -> FastJSONResponse:
    # Returning a Response skips FastAPI's re-validation of an object we just built; the
    # route's response_model still documents the shape in OpenAPI.
    return FastJSONResponse(model.model_dump())


class NativeHandlers:
    """The native routes' logic as `(path_params, body) -> Response`: called by the FastAPI routes
    and, on a standalone resources server, straight from the hot-route layer (rollgate.core.app)."""

    def __init__(self, runtime: EnvRuntime):
        self.runtime = runtime
        self.comp = runtime.component

    async def seed(self, params: dict[str, str], raw: bytes) -> Response:
        return _json(await self.runtime.seed(self.runtime.parse(parse_json(raw, component=self.comp))))

    async def call_tool(self, params: dict[str, str], raw: bytes) -> Response:
        body = parse_json(raw, component=self.comp)
        if not isinstance(body, dict):
            raise BadRequest('body must be an object {"arguments": {...}}', component=self.comp, field="body")
        role = body.get("role")  # a multi-role environment: who calls (rollgate.resources_servers.roles)
        if role is not None and not isinstance(role, str):
            raise BadRequest("role must be a string", component=self.comp, field="role")
        sid, name = params["session_id"], params["tool_name"]
        return _json(await self.runtime.call_tool(sid, name, body.get("arguments", {}), role))

    async def verify(self, params: dict[str, str], raw: bytes) -> Response:
        # Same answers as a FastAPI `body: VerifyRequest` parameter: 422 naming the field.
        if not raw:
            raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required"}])
        try:
            request = VerifyRequest.model_validate_json(raw)
        except ValidationError as exc:
            raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None
        return _json(await self.runtime.verify(params["session_id"], request))

    async def delete(self, params: dict[str, str], raw: bytes) -> Response:
        await self.runtime.close(params["session_id"])
        return Response(status_code=204)

    def install_hot(self, app: FastAPI) -> None:
        hot_route(app, "POST", "/sessions", self.seed)
        hot_route(app, "POST", "/sessions/{session_id}/tools/{tool_name}", self.call_tool)
        hot_route(app, "POST", "/sessions/{session_id}/verify", self.verify)
        hot_route(app, "DELETE", "/sessions/{session_id}", self.delete)


def env_router(runtime: EnvRuntime, r: APIRouter | None = None) -> APIRouter:
    """The native routes of one environment (mounted at / alone, or at /envs/{name} in a gateway).

    Pass `r` (e.g. `app.router`) to add the routes to it directly: an included router costs a
    walk over its routes on every request in current FastAPI."""
    r = r if r is not None else APIRouter()
    h = NativeHandlers(runtime)
    tags: list[str | Enum] = [runtime.name]

    # The bodies are read by hand (NativeHandlers, shared with the hot routes): api_docs
    # publishes the schemas of the models they validate with.
    tool_name_doc = Path(description="one of GET /tools", json_schema_extra={"enum": list(runtime.specs)})

    @r.get("/tools", summary="Tool schemas (OpenAI function format)", tags=tags, **api_docs.TOOLS_DOCS)
    async def tools() -> list[dict[str, Any]]:
        return runtime.tools()

    @r.post("/sessions", summary="Seed a session from a task row", tags=tags, **api_docs.seed_docs(runtime))
    async def create_session(request: Request) -> Response:
        return await h.seed({}, await request.body())

    @r.post(
        "/sessions/{session_id}/tools/{tool_name}",
        summary="Call a tool in a session",
        tags=tags,
        **api_docs.tool_call_docs(runtime),
    )
    async def call_tool(session_id: str, request: Request, tool_name: str = tool_name_doc) -> Response:
        return await h.call_tool({"session_id": session_id, "tool_name": tool_name}, await request.body())

    @r.post("/sessions/{session_id}/verify", summary="Verify a session's answer", tags=tags, **api_docs.VERIFY_DOCS)
    async def verify(session_id: str, request: Request) -> Response:
        return await h.verify({"session_id": session_id}, await request.body())

    if runtime.env.roles:  # a multi-role environment (docs/roles.md)

        @r.get("/roles", summary="Each role's tools (a multi-role environment)", tags=tags)
        async def roles() -> dict[str, Any]:
            return {"roles": runtime.role_tools(), "zero_sum": runtime.env.zero_sum}

        @r.post(
            "/sessions/{session_id}/observe",
            summary="What one role sees now, and whose turn it is",
            tags=tags,
            response_model=RoleView,
        )
        async def observe(session_id: str, request: Request) -> Response:
            body = parse_json(await request.body() or b"{}", component=h.comp)
            role = body.get("role") if isinstance(body, dict) else None
            peek = body.get("peek", False) if isinstance(body, dict) else False
            if not isinstance(peek, bool):
                raise BadRequest(
                    "peek: a boolean (true: whose turn only, nothing marked seen)", component=h.comp, field="peek"
                )
            return _json(await runtime.observe(session_id, role, peek=peek))

    @r.delete("/sessions/{session_id}", status_code=204, summary="Close a session", tags=tags, **api_docs.DELETE_DOCS)
    async def delete(session_id: str) -> Response:
        return await h.delete({"session_id": session_id}, b"")

    # MCP over streamable HTTP (interop/mcp_server.py): a plain ASGI route added last, so the
    # native routes match before it; the `mcp` package loads on its first request only.
    # Plain routes and mounts do not get an APIRouter's prefix by themselves: add it here.
    r.add_route(r.prefix + MCP_PATH, MCPSessionEndpoint(runtime), methods=MCP_METHODS, include_in_schema=False)
    # OpenEnv's wire protocol (interop/openenv_serve.py) under /openenv, built on its first request.
    r.mount(r.prefix + OPENENV_PATH, OpenEnvFace(runtime))
    return r


def _compat_session(request: Request, comp: str) -> str:
    sid = request.headers.get("x-session-id") or request.cookies.get(SESSION_COOKIE)
    if not sid:
        raise BadRequest(
            "no session: call /seed_session first (cookie rollgate_session or header x-session-id)",
            component=comp,
            field="session_id",
        )
    return sid


def nemo_gym_router(runtime: EnvRuntime, r: APIRouter | None = None) -> APIRouter:
    r = r if r is not None else APIRouter()
    comp = runtime.component
    tags: list[str | Enum] = ["nemo-gym compatibility"]

    @r.post("/seed_session", tags=tags, summary="Seed a session (NeMo Gym)", **api_docs.compat_seed_docs(runtime))
    async def seed_session(request: Request, response: Response) -> dict[str, Any]:
        body = await read_json(request, component=comp) if await request.body() else {}
        if not isinstance(body, dict):
            raise BadRequest("body must be a JSON object", component=comp, field="body")
        body.setdefault("responses_create_params", {"input": []})
        seeded = await runtime.seed(runtime.parse(body))
        response.set_cookie(SESSION_COOKIE, seeded.session_id, httponly=True, samesite="strict")
        return seeded.model_dump()

    @r.post("/verify", tags=tags, summary="Verify (NeMo Gym)", **api_docs.compat_verify_docs(runtime))
    async def verify(request: Request) -> dict[str, Any]:
        body = await read_json(request, component=comp)
        if not isinstance(body, dict):
            raise BadRequest("body must be a JSON object", component=comp, field="body")
        req = VerifyRequest(response=response_text(body.get("response")))
        sid = request.headers.get("x-session-id") or request.cookies.get(SESSION_COOKIE)
        if sid:
            result = await runtime.verify(sid, req)
        else:
            # Stateless NeMo Gym verify: the row's fields come with the request.
            row = {k: v for k, v in body.items() if k != "response"}
            row.setdefault("responses_create_params", {"input": []})
            seeded = await runtime.seed(runtime.parse(row))
            try:
                result = await runtime.verify(seeded.session_id, req)
            finally:
                await runtime.close(seeded.session_id)
        return {**body, **result.model_dump(exclude_none=True)}

    for name in runtime.specs:

        def make(tool_name: str):
            async def call(request: Request) -> dict[str, Any]:
                body = await read_json(request, component=comp) if await request.body() else {}
                out = await runtime.call_tool(_compat_session(request, comp), tool_name, body)
                return out.model_dump()

            call.__name__ = f"compat_{tool_name}"
            return call

        r.add_api_route(
            f"/{name}",
            make(name),
            methods=["POST"],
            summary=f"NeMo Gym tool route {name}",
            tags=tags,
            **api_docs.compat_tool_docs(runtime),
        )
    return r


def create_resources_app(runtime: EnvRuntime, *, registry=None, max_body_bytes: int | None = None) -> FastAPI:
    kwargs = {"max_body_bytes": max_body_bytes} if max_body_bytes else {}
    app = make_app(
        f"Rollgate resources server: {runtime.name}", component=f"env:{runtime.name}", registry=registry, **kwargs
    )
    app.state.runtime = runtime
    env_router(runtime, app.router)
    nemo_gym_router(runtime, app.router)
    NativeHandlers(runtime).install_hot(app)
    return app
