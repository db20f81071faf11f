"""An environment's tools served over MCP (streamable HTTP), one MCP endpoint per seeded session.

    POST /sessions                 {task row} -> {session_id}     (the native seed route)
    POST /sessions/{id}/mcp        MCP: initialize, tools/list, tools/call  (this module)
    POST /sessions/{id}/verify     the native verify route, as for any episode

The session lives in the URL, so an MCP client (a black-box agent harness) plays exactly one
seeded Rollgate session and needs nothing but the URL. Only the environment's tools are
reachable: `tools/call` goes to `EnvRuntime.call_tool`, which knows the environment's tools and
nothing else, so no name reaches seed, reset, verify, close or state; every other MCP method
(resources, prompts, ...) is "method not found".

A multi-role environment (docs/roles.md) is served one role per endpoint:
`/sessions/{id}/mcp?role=<role>`. Each role's client lists only that role's tools and every call
runs as that role, so a call out of turn is a tool result with `isError` naming the role and whose
turn it is, as on the native route; each result's `_meta` says whose turn it is now
(`rollgate/turn`) and whether the episode is over (`rollgate/done`). An endpoint that names no
role, or one the environment does not have, is a 400 naming the roles before any MCP; a role on a
single-role environment too. Observations and verify stay on the native routes (`observe`,
`verify` with the role): the model calls only tools.

Step mode, `?role=<role>&wait=<seconds>` (a harness playing one role, docs/roles.md): a call
waits until it is the role's turn (or the game is over), runs as the role, then, if the turn
passed to another role, waits until it comes back or the game ends, and returns the tool's output
followed by the role's fresh observation (`observe`: the other roles' moves), like env.step() in
single-agent RL. Waiting polls the session record (whose turn only) every POLL_S; when `wait`
runs out first the result says that it is still another role's turn. A bad `wait` is a 400.

The transport runs stateless (a fresh MCP server transport per HTTP request, JSON answers, no
MCP session id): the Rollgate session is the only state, kept in the session store, so any
replica behind a gateway can answer any request. The `mcp` package is imported on the first
request, never at start-up; the native routes never pass through here.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from starlette.types import Receive, Scope, Send

from rollgate.core.app import error_response
from rollgate.core.errors import BadRequest, NotFound, RollgateError
from rollgate.core.schemas import ToolOutput
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.roles import tools_of

MCP_PATH = "/sessions/{session_id}/mcp"
MCP_METHODS = ["GET", "POST", "DELETE"]

MISSING_EXTRA = 'MCP needs the optional extra "interop": pip install "rollgate[interop]"'
MAX_WAIT_S = 3600.0
POLL_S = 0.05


def _query(scope: Scope, name: str) -> str | None:
    from urllib.parse import parse_qs

    given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(name)
    return given[-1] if given else None


def endpoint_wait(runtime: EnvRuntime, scope: Scope) -> float | None:
    """The step mode's `?wait=` (seconds, 0 < wait <= MAX_WAIT_S), on a role's endpoint only."""
    raw = _query(scope, "wait")
    if raw is None:
        return None
    try:
        wait = float(raw)
    except ValueError:
        wait = float("nan")
    if not runtime.env.roles or not 0 < wait <= MAX_WAIT_S:  # nan fails the comparison too
        why = "a role's endpoint only" if not runtime.env.roles else f"seconds, above 0 and at most {MAX_WAIT_S:g}"
        raise BadRequest(
            f"wait: {raw!r} is not a wait for the step mode ({why}), e.g. ?role=<role>&wait=60",
            component=runtime.component,
            field="wait",
        )
    return wait


def endpoint_role(runtime: EnvRuntime, scope: Scope) -> str | None:
    """The role an endpoint serves (`?role=`): required on a multi-role environment, refused on a
    single-role one; a 400 naming the roles otherwise."""
    env = runtime.env
    role = _query(scope, "role")
    if env.roles and role not in env.roles:
        what = "names no role" if role is None else f"names role {role!r}"
        raise BadRequest(
            f"role: the MCP endpoint {what}; {env.name} has roles: {', '.join(env.roles)}. Each role plays "
            f"through its own endpoint, e.g. /sessions/{{session_id}}/mcp?role={env.roles[0]}",
            component=runtime.component,
            field="role",
        )
    if role is not None and not env.roles:
        raise BadRequest(
            f"role: {env.name} has a single role; leave role out of the MCP endpoint",
            component=runtime.component,
            field="role",
        )
    return role


def mcp_tools(runtime: EnvRuntime) -> list[Any]:
    """The environment's tools as MCP `Tool`s (the OpenAI function schemas, unchanged)."""
    from mcp import types

    return [
        types.Tool(name=s["name"], description=s.get("description") or None, inputSchema=s["parameters"])
        for s in runtime.tools()
    ]


class MCPSessionEndpoint:
    """The ASGI app behind `/sessions/{session_id}/mcp` (added to a router as a plain route)."""

    def __init__(self, runtime: EnvRuntime):
        self.runtime = runtime
        self._server: Any = None

    def _build(self) -> Any:
        from mcp import types
        from mcp.server.lowlevel import Server

        runtime = self.runtime
        server = Server(f"rollgate-{runtime.name}")
        tools = mcp_tools(runtime)

        @server.list_tools()
        async def list_tools() -> list[types.Tool]:
            role = server.request_context.request.query_params.get("role")
            if not runtime.env.roles:
                return tools
            mine = set(tools_of(runtime.env, role))  # a role is offered its own tools only
            return [t for t in tools if t.name in mine]

        # The runtime validates arguments with the tool's own model (the same error text the
        # native route gives); the SDK's jsonschema pass would only repeat it.
        @server.call_tool(validate_input=False)
        async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
            request = server.request_context.request
            session_id = request.scope["path_params"]["session_id"]
            role = request.query_params.get("role") if runtime.env.roles else None
            wait = request.query_params.get("wait")
            if wait is not None and role is not None:
                out = await step(runtime, session_id, name, arguments, role, float(wait))
            else:
                out = await runtime.call_tool(session_id, name, arguments, role)
            meta = {"rollgate/turn": out.turn, "rollgate/done": out.done} if runtime.env.roles else None
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=out.output)], isError=out.is_error, _meta=meta
            )

        return server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            # Bound to a seeded session: an unknown or expired one is a 404 before any MCP.
            await self.runtime.store.get(scope["path_params"]["session_id"])
            endpoint_role(self.runtime, scope)
            endpoint_wait(self.runtime, scope)
            if self._server is None:
                try:
                    self._server = self._build()
                except ImportError:
                    raise BadRequest(MISSING_EXTRA, component=self.runtime.component, field="mcp") from None
        except RollgateError as exc:
            await error_response(exc)(scope, receive, send)
            return
        await serve_stateless(self._server, scope, receive, send)


async def _turn_back(runtime: EnvRuntime, session_id: str, role: str, deadline: float) -> str | None:
    """Whose turn it is once it is `role`'s, the game is over, or `deadline` passed."""
    while True:
        try:
            turn = (await runtime.observe(session_id, role, peek=True)).turn
        except NotFound:  # the episode closed the session while this call waited
            return None
        if turn in (role, None) or time.monotonic() >= deadline:
            return turn
        await asyncio.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))


async def step(
    runtime: EnvRuntime, session_id: str, name: str, arguments: dict[str, Any], role: str, wait_s: float
) -> ToolOutput:
    """The step mode: wait for the role's turn, move, wait for the turn to come back, and answer
    with the move's output and what the role sees then."""
    deadline = time.monotonic() + wait_s
    await _turn_back(runtime, session_id, role, deadline)
    out = await runtime.call_tool(session_id, name, arguments, role)  # out of turn still: its error says so
    if out.turn not in (role, None):
        await _turn_back(runtime, session_id, role, deadline)
    try:
        view = await runtime.observe(session_id, role)
    except NotFound:
        return out.model_copy(update={"turn": None, "done": True})
    parts = [out.output]
    if view.observation:
        parts.append(view.observation)
    if view.done:
        parts.append("The game is over: no role moves any more.")
    elif view.turn != role:
        parts.append(f"(waited {wait_s:g}s: it is still {view.turn!r}'s turn; call again to wait on)")
    return out.model_copy(update={"output": "\n\n".join(parts), "turn": view.turn, "done": view.done})


async def serve_stateless(server: Any, scope: Scope, receive: Receive, send: Send) -> None:
    """One HTTP request through a fresh stateless transport (what the SDK's session manager does
    in stateless mode, without its long-lived task group: nothing to start with the app)."""
    import anyio
    from mcp.server.streamable_http import StreamableHTTPServerTransport

    transport = StreamableHTTPServerTransport(mcp_session_id=None, is_json_response_enabled=True)

    async def run_server(*, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        async with transport.connect() as (read, write):
            task_status.started()
            await server.run(read, write, server.create_initialization_options(), stateless=True)

    async with anyio.create_task_group() as tg:
        await tg.start(run_server)
        try:
            await transport.handle_request(scope, receive, send)
        finally:
            # the server task ends only once the transport is terminated, even on cancellation
            with anyio.CancelScope(shield=True):
                await transport.terminate()
