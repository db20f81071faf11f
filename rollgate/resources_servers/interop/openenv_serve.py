"""Every environment served over OpenEnv's wire protocol, so OpenEnv's own clients can drive it.

Mounted at `<env base>/openenv` (`env_router`): `/openenv/...` on a resources server,
`/envs/<name>/openenv/...` on a multi-environment one, in the embedded app and through the gateway.

    WS   /ws        the episode protocol: frames {"type": "reset"|"step"|"state"|"close"|"mcp", "data": ...}
                    answered by {"type": "observation"|"state"|"mcp", "data": ...} or
                    {"type": "error", "data": {"message", "code", "field"?}}; one connection owns
                    one episode, and its Rollgate session is deleted when the socket closes
    POST /reset, /step; GET /state   stateless, as OpenEnv's own server: each call runs on a fresh
                    session, deleted before the answer (episodes run over /ws)
    GET  /schema, /health, /metadata, /openapi.json;  POST /mcp (tools/list; tools/call in an episode)

A multi-role environment (docs/roles.md) is refused on this face (`multi_role_refusal`): every
reset and step answers an error naming the reason, and /metadata lists its roles.

The action, observation and state are openenv_episode.py's. The face's app is built on its first
request (the MCP face does the same): a hundred environments in one process cost nothing until used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import Receive, Scope, Send

from rollgate import __version__
from rollgate.core import jsonutil
from rollgate.core.app import FastJSONResponse, install_error_handlers, json_route, parse_json
from rollgate.core.errors import BadRequest, CapacityError, NotFound, RollgateError
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.interop.openenv_episode import (
    Episode,
    OpenEnvObservation,
    OpenEnvState,
    ResetData,
    TaskSource,
    parse_action,
)

log = logging.getLogger("rollgate.openenv")

OPENENV_PATH = "/openenv"
DEFAULT_MAX_SESSIONS = 256
COMPONENT = "openenv"


class StepBody(BaseModel):
    """OpenEnv's step request; `seed` and `task` choose the fresh session's task (stateless HTTP)."""

    model_config = ConfigDict(extra="forbid")

    action: dict[str, Any] = Field(description='{"tool": <name>, "arguments": {...}} or {"answer": "..."}')
    timeout_s: float | None = Field(None, gt=0, description="accepted for OpenEnv clients; tool timeouts apply")
    request_id: str | None = Field(None, max_length=255)
    seed: int | None = Field(None, ge=0)
    task: dict[str, Any] | None = None


class StepResult(BaseModel):
    observation: OpenEnvObservation
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] | None = None


def action_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The action's JSON Schema: one `oneOf` branch per tool (its name as a const, its parameters
    as `arguments`) and one for the answer. Each branch is a whole object schema with its own
    `properties`, so a client can build an action from the branch it picks (OpenEnv's clients
    take a branch's properties); the top-level properties list every field for forms."""
    names = [t["name"] for t in tools]
    metadata = {"type": "object", "description": "passed through to the observation's metadata"}
    calls = [
        {
            "title": f"call {t['name']}",
            "description": t.get("description") or f"call the tool {t['name']}",
            "type": "object",
            "properties": {
                "tool": {"type": "string", "const": t["name"]},
                "arguments": t["parameters"],
                "metadata": metadata,
            },
            "required": ["tool"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    answer = {
        "title": "answer",
        "description": "the final answer: runs verify and returns done=true with the verify reward",
        "type": "object",
        "properties": {"answer": {"type": "string"}, "metadata": metadata},
        "required": ["answer"],
        "additionalProperties": False,
    }
    return {
        "title": "RollgateAction",
        "description": 'Call a tool: {"tool": <name>, "arguments": {...}}. End the episode: {"answer": "..."}: '
        "runs verify and returns done=true with the verify reward.",
        "type": "object",
        "properties": {
            "tool": {"type": "string", "enum": names, "description": "the tool to call"},
            "arguments": {"type": "object", "description": "the tool's arguments (its parameters schema)"},
            "answer": {"type": "string", "description": "the final answer: ends the episode"},
            "metadata": metadata,
        },
        "additionalProperties": False,
        "oneOf": [*calls, answer],
    }


def runtime_tasks(runtime: EnvRuntime) -> TaskSource | None:
    """The environment's task generator: the runtime's (its registry entry's), else its module's
    example_tasks."""
    from rollgate.resources_servers.families.splits import generator_from_examples

    return runtime.tasks or generator_from_examples(type(runtime.env))


def ws_code(exc: Exception) -> str:
    if isinstance(exc, CapacityError):
        return "CAPACITY_REACHED"
    if isinstance(exc, NotFound):
        return "SESSION_ERROR"  # the session expired or was deleted
    if isinstance(exc, BadRequest) and exc.status in (400, 422):
        return "VALIDATION_ERROR"
    return "EXECUTION_ERROR"


def error_frame(message: str, code: str, **extra: Any) -> str:
    return jsonutil.dumps_str({"type": "error", "data": {"message": message, "code": code, **extra}})


def exception_frame(exc: Exception, runtime: EnvRuntime) -> str:
    if isinstance(exc, RollgateError):
        extra = {"component": exc.component, **({"field": exc.field} if exc.field else {})}
        named = f" (field {exc.field})" if exc.field and exc.field not in exc.message else ""
        return error_frame(exc.message + named, ws_code(exc), **extra)
    log.exception("OpenEnv frame failed in %s", runtime.name)
    return error_frame(f"{type(exc).__name__}: {exc}", "EXECUTION_ERROR", component=f"env:{runtime.name}")


def multi_role_refusal(runtime: EnvRuntime) -> BadRequest | None:
    """Why a multi-role environment is not served over OpenEnv (None: a single-role one is).
    OpenEnv's episode is one agent's: reset, step, and one reward for that agent. A game's
    episode needs a policy acting for every role on one session; OpenEnv's own multi-player
    environments play the other seats inside the server with a built-in opponent, and Rollgate
    has none to offer (its opponents are policies that a job names). Serving one seat would
    leave the others unplayed, and one client playing every seat would break the one-reward
    contract, so the face says so instead of half-working."""
    env = runtime.env
    if not env.roles:
        return None
    return BadRequest(
        f"env: {env.name} has roles ({', '.join(env.roles)}) and OpenEnv serves single-agent episodes "
        "(reset, step, one reward); a multi-role episode needs a policy for every role on one session. "
        "Play it with one MCP endpoint per role (/sessions/{id}/mcp?role=...), the native routes with "
        "`role`, or a rollout job with `roles` (docs/roles.md)",
        component=COMPONENT,
        field="env",
    )


def rpc_error(rid: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


class OpenEnvFace:
    """The ASGI app mounted at `<env base>/openenv`."""

    def __init__(
        self,
        runtime: EnvRuntime,
        *,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        tasks: Callable[[], TaskSource | None] | None = None,
    ):
        self.runtime = runtime
        self.max_sessions = max_sessions
        self.active = 0  # open WebSocket episodes
        self._tasks = tasks or (lambda: runtime_tasks(runtime))
        self._app: FastAPI | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            self._app = self._build()
        await self._app(scope, receive, send)

    def episode(self) -> Episode:
        return Episode(self.runtime, self._tasks)

    # --- the JSON-RPC subset OpenEnv serves at /mcp (and in "mcp" frames) ----------------------
    async def mcp(self, body: Any, episode: Episode | None) -> dict[str, Any]:
        if not isinstance(body, dict) or body.get("jsonrpc") != "2.0" or not isinstance(body.get("method"), str):
            rid = body.get("id") if isinstance(body, dict) else None
            return rpc_error(rid, -32600, 'invalid request: {"jsonrpc": "2.0", "method": ..., "params": {...}}')
        rid, method, params = body.get("id"), body["method"], body.get("params", {})
        if not isinstance(params, dict):
            return rpc_error(rid, -32602, "params must be an object")
        if method == "tools/list":
            tools = [
                {"name": t["name"], "description": t.get("description", ""), "inputSchema": t["parameters"]}
                for t in self.runtime.tools()
            ]
            return {"jsonrpc": "2.0", "id": rid, "result": {"tools": tools}}
        if method != "tools/call":
            return rpc_error(rid, -32601, f"method not found: {method} (served: tools/list, tools/call)")
        if episode is None:
            return rpc_error(rid, -32000, "tools/call runs in an episode: open /ws, reset, then send mcp frames")
        name = params.get("name")
        if not isinstance(name, str):
            return rpc_error(rid, -32602, "params.name: the tool to call is required")
        try:
            out = await episode.call_tool(episode.live(), name, params.get("arguments") or {})
        except RollgateError as exc:
            return rpc_error(rid, -32602 if isinstance(exc, BadRequest) else -32000, exc.message)
        content = [{"type": "text", "text": out.output}]
        return {"jsonrpc": "2.0", "id": rid, "result": {"content": content, "isError": out.is_error}}

    # --- the WebSocket episode ------------------------------------------------------------------
    async def frame(self, episode: Episode, text: str) -> tuple[str | None, bool]:
        """One client frame -> (the answer frame, whether the connection ends)."""
        try:
            msg = jsonutil.loads(text)
        except jsonutil.JSONDecodeError as exc:
            return error_frame(f"invalid JSON: {exc}", "INVALID_JSON"), False
        deep = jsonutil.too_deep(msg, text)  # the same nesting limit as every HTTP body
        if deep is not None:
            message = f"{deep}: nested deeper than {jsonutil.MAX_DEPTH} levels"
            return error_frame(message, "VALIDATION_ERROR", field=deep), False
        if not isinstance(msg, dict):
            return error_frame('a frame is a JSON object {"type": ..., "data": ...}', "VALIDATION_ERROR"), False
        kind, data = msg.get("type"), msg.get("data")
        try:
            refused = multi_role_refusal(self.runtime) if kind in ("reset", "step") else None
            if refused is not None:
                raise refused
            if kind == "reset":
                return jsonutil.dumps_str({"type": "observation", "data": await episode.reset(data)}), False
            if kind == "step":
                if data is None:
                    raise BadRequest("a step frame needs data: the action", component=COMPONENT, field="data")
                return jsonutil.dumps_str({"type": "observation", "data": await episode.step(data)}), False
            if kind == "state":
                return jsonutil.dumps_str({"type": "state", "data": episode.state.model_dump()}), False
            if kind == "close":
                return None, True
            if kind == "mcp":
                return jsonutil.dumps_str({"type": "mcp", "data": await self.mcp(data, episode)}), False
        except Exception as exc:  # noqa: BLE001 - every failure is an error frame; the socket stays open
            return exception_frame(exc, self.runtime), False
        known = "reset, step, state, close, mcp"
        return error_frame(f"unknown message type {kind!r} (known: {known})", "UNKNOWN_TYPE", field="type"), False

    async def serve_ws(self, ws: WebSocket) -> None:
        await ws.accept()
        if self.active >= self.max_sessions:
            message = f"{self.runtime.name}: all {self.max_sessions} OpenEnv sessions are in use; retry later"
            frame = error_frame(
                message, "CAPACITY_REACHED", active_sessions=self.active, max_sessions=self.max_sessions
            )
            with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                await ws.send_text(frame)
                await ws.close(code=1013)
            return
        self.active += 1
        episode = self.episode()
        try:
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                if text is None:
                    text = (message.get("bytes") or b"").decode("utf-8", "replace")
                answer, last = await self.frame(episode, text)
                if answer is not None:
                    await ws.send_text(answer)
                if last:
                    break
        except WebSocketDisconnect:
            pass
        finally:
            self.active -= 1
            # shielded: a cancelled connection (server shutdown) still deletes its session
            with contextlib.suppress(Exception):
                await asyncio.shield(episode.close())
            with contextlib.suppress(Exception):
                await ws.close()

    # --- the app ----------------------------------------------------------------------------------
    def _build(self) -> FastAPI:
        runtime = self.runtime
        app = FastAPI(
            title=f"Rollgate {runtime.name} (OpenEnv protocol)",
            version="1.0.0",  # the OpenEnv HTTP profile this face speaks
            description=__doc__,
            docs_url=None,
            redoc_url=None,
            default_response_class=FastJSONResponse,
        )

        install_error_handlers(app, COMPONENT)
        app.router.route_class = json_route(COMPONENT)  # the nesting limit of every Rollgate body

        schemas = {
            "action": action_schema(runtime.tools()),
            "observation": OpenEnvObservation.model_json_schema(),
            "state": OpenEnvState.model_json_schema(),
            "reset_observation": OpenEnvObservation.model_json_schema(),
        }
        tags = ["OpenEnv"]

        async def run(body: ResetData | None, action: dict[str, Any] | None) -> dict[str, Any]:
            refused = multi_role_refusal(runtime)
            if refused is not None:
                raise refused
            episode = self.episode()
            try:
                result = await episode.reset(body.model_dump(exclude_unset=True) if body else None)
                return result if action is None else await episode.step(action)
            finally:
                await episode.close()

        @app.post("/reset", response_model=StepResult, tags=tags, summary="Reset (stateless: a fresh session)")
        async def reset(body: ResetData | None = None) -> FastJSONResponse:
            return FastJSONResponse(await run(body, None))

        @app.post("/step", response_model=StepResult, tags=tags, summary="Step (stateless: a fresh session)")
        async def step(body: StepBody) -> FastJSONResponse:
            parse_action(body.action)  # a bad action is refused before a session is seeded
            data = ResetData(seed=body.seed, task=body.task)
            return FastJSONResponse(await run(data, body.action))

        @app.get("/state", response_model=OpenEnvState, tags=tags, summary="State of a fresh environment")
        async def state() -> dict[str, Any]:
            return OpenEnvState(env=runtime.name).model_dump()

        @app.get("/schema", tags=tags, summary="Action, observation and state JSON Schemas")
        async def schema() -> dict[str, Any]:
            return schemas

        @app.get("/health", tags=tags)
        async def health() -> dict[str, str]:
            return {"status": "healthy"}

        @app.get("/metadata", tags=tags)
        async def metadata() -> dict[str, Any]:
            description = runtime.env.description or f"Rollgate environment {runtime.name}"
            roles = {"roles": list(runtime.env.roles)} if runtime.env.roles else {}  # refused: see /reset
            return {"name": runtime.name, "description": description, "version": __version__, **roles}

        @app.post("/mcp", tags=tags, summary="JSON-RPC: tools/list (tools/call runs in a /ws episode)")
        async def mcp(request: Request) -> dict[str, Any]:
            try:
                body = parse_json(await request.body(), component=runtime.component)
            except BadRequest as exc:  # not JSON, or nested too deep
                return rpc_error(None, -32700, f"parse error: {exc.message}")
            return await self.mcp(body, None)

        app.add_api_websocket_route("/ws", self.serve_ws)
        return app
