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

The transport runs stateless (a fresh MCP server transport per HTTP request, JSON answers, no
MCP session id): the Rollgate session is the only state, kept in the session store, so any
replica behind a gateway can answer any request. The `mcp` package is imported on the first
request, never at start-up; the native routes never pass through here.
"""

from __future__ import annotations

from typing import Any

from starlette.types import Receive, Scope, Send

from rollgate.core.app import error_response
from rollgate.core.errors import BadRequest, RollgateError
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.roles import tools_of

MCP_PATH = "/sessions/{session_id}/mcp"
MCP_METHODS = ["GET", "POST", "DELETE"]

MISSING_EXTRA = 'MCP needs the optional extra "interop": pip install "rollgate[interop]"'


def endpoint_role(runtime: EnvRuntime, scope: Scope) -> str | None:
    """The role an endpoint serves (`?role=`): required on a multi-role environment, refused on a
    single-role one; a 400 naming the roles otherwise."""
    from urllib.parse import parse_qs

    env = runtime.env
    given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("role")
    role = given[-1] if given else None
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
            if self._server is None:
                try:
                    self._server = self._build()
                except ImportError:
                    raise BadRequest(MISSING_EXTRA, component=self.runtime.component, field="mcp") from None
        except RollgateError as exc:
            await error_response(exc)(scope, receive, send)
            return
        await serve_stateless(self._server, scope, receive, send)


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
