"""An environment's tools served over MCP (streamable HTTP), one MCP endpoint per seeded session.

    POST /sessions                 {task row} -> {session_id}     (the native seed route)
    POST /sessions/{id}/mcp        MCP: initialize, tools/list, tools/call  (this module)
    POST /sessions/{id}/verify     the native verify route, as for any episode

The session lives in the URL, so an MCP client (a black-box agent harness) plays exactly one
seeded Rollgate session and needs nothing but the URL. Only the environment's tools are
reachable: `tools/call` goes to `EnvRuntime.call_tool`, which knows the environment's tools and
nothing else, so no name reaches seed, reset, verify, close or state; every other MCP method
(resources, prompts, ...) is "method not found".

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

MCP_PATH = "/sessions/{session_id}/mcp"
MCP_METHODS = ["GET", "POST", "DELETE"]

MISSING_EXTRA = 'MCP needs the optional extra "interop": pip install "rollgate[interop]"'


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
            return tools

        # The runtime validates arguments with the tool's own model (the same error text the
        # native route gives); the SDK's jsonschema pass would only repeat it.
        @server.call_tool(validate_input=False)
        async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
            request = server.request_context.request
            session_id = request.scope["path_params"]["session_id"]
            out = await runtime.call_tool(session_id, name, arguments)
            return types.CallToolResult(content=[types.TextContent(type="text", text=out.output)], isError=out.is_error)

        return server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            # Bound to a seeded session: an unknown or expired one is a 404 before any MCP.
            await self.runtime.store.get(scope["path_params"]["session_id"])
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
