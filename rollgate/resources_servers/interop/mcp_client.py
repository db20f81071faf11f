"""An environment whose tools come from an external MCP server, with a verifier of its own.

    class Notes(MCPToolsEnvironment):
        name = "notes"
        server = MCPServer(command=["python", "notes_server.py"])   # or MCPServer(url="http://...")

        class State(MCPSessionState):
            expected: str = ""

        def seed(self, task, rng):
            return self.State(expected=task.env_fields["expected"])

        async def verify(self, state, request):
            saved = await self.call_server(state, "read_note", {})
            return VerifyResult(reward=float(saved == state.expected))

Tool schemas come from the server's `tools/list` when the environment is built (so start-up
checks that the server runs). Each Rollgate session gets its own MCP client session (for a stdio
server, its own process), opened by the session's first tool call and closed after
`idle_timeout_s` without calls, or by `close_session`. The session store holds only the State
(plain JSON: a key naming the connection); the connection itself lives in this process, so a
session is served by the replica that opened it (docs/interop.md, "Replicas").

A server that cannot be started or reached, dies mid-episode, answers garbage or takes longer
than `tool_timeout_s` raises `UpstreamError` naming the server's command or URL: the episode
ends with env_error, never a reward. A tool result flagged `isError` is the model's to read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shlex
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from rollgate.core import jsonutil
from rollgate.core.blocking import run_sync
from rollgate.core.errors import UpstreamError, UpstreamTimeout
from rollgate.core.schemas import TaskRow
from rollgate.resources_servers.base import Environment, ToolError
from rollgate.resources_servers.interop.tool_specs import PerInstance as _PerInstance
from rollgate.resources_servers.interop.tool_specs import SchemaToolSpec as MCPToolSpec
from rollgate.resources_servers.interop.tool_specs import bind_tool

log = logging.getLogger("rollgate.interop.mcp")

COMPONENT = "mcp"


@dataclass(frozen=True)
class MCPServer:
    """Where the tools live: a stdio `command` (argv) or a streamable-HTTP `url`, exactly one."""

    command: Sequence[str] | None = None
    url: str | None = None
    env: Mapping[str, str] | None = None  # stdio: the process environment (default: a safe subset)
    cwd: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)  # HTTP: e.g. Authorization
    connect_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError("MCPServer needs exactly one of `command` (stdio argv) or `url` (streamable HTTP)")
        if self.command is not None and (
            isinstance(self.command, str) or not self.command or not all(isinstance(a, str) for a in self.command)
        ):
            raise ValueError(f"MCPServer.command must be a non-empty list of strings (argv), got {self.command!r}")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"MCPServer.url must be an http(s) URL, got {self.url!r}")

    def describe(self) -> str:
        if self.command is not None:
            return f"MCP server `{shlex.join(self.command)}` (stdio)"
        return f"MCP server {self.url}"


class MCPSessionState(BaseModel):
    """Base of an MCP environment's State: the key of the session's live MCP connection."""

    mcp_key: str = Field(default_factory=lambda: secrets.token_urlsafe(12))
    mcp_opened: bool = False  # set by the first tool call: a later miss means the connection is gone


_STDERR_TAIL = 2000  # characters of a stdio server's stderr that an error quotes

# What a stdio server that exits at once (a relative path, a module that does not import) was
# missing: the SDK starts it in this process's working directory with a minimal environment.
_STDIO_HINT = (
    "a stdio server starts in Rollgate's working directory with a minimal environment (PATH, HOME, "
    "no PYTHONPATH): set the entry's `cwd` (the directory it runs from) and `env` (e.g. PYTHONPATH)"
)


def _server_error(
    server: MCPServer, what: str, exc: BaseException | None = None, stderr: str | None = None
) -> UpstreamError:
    detail = f": {type(exc).__name__}: {exc}" if exc is not None and str(exc) else ""
    if exc is not None and not detail:
        detail = f": {type(exc).__name__}"
    if server.command is not None and stderr is not None:
        tail = stderr.strip()[-_STDERR_TAIL:]
        detail += f"; its stderr ends: {tail}" if tail else "; its stderr was empty"
        detail += f" ({_STDIO_HINT})"
    return UpstreamError(f"{server.describe()} {what}{detail}", component=COMPONENT)


class _Stderr:
    """A stdio server's stderr: an unnamed temporary file (what it wrote is all there once it has
    exited, no reader needed), whose end an error quotes and the log gets."""

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed by close()

    def tail(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            self.file.flush()
            size = self.file.seek(0, os.SEEK_END)
            self.file.seek(max(0, size - 4 * _STDERR_TAIL))
            return self.file.read()
        return ""

    def close(self) -> None:
        self.file.close()


def _leaf(exc: BaseException) -> BaseException:
    # anyio wraps a transport's failure in exception groups: report the first real cause
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


@contextlib.asynccontextmanager
async def _client_session(server: MCPServer, stderr: _Stderr | None = None):
    from mcp import ClientSession

    if server.command is not None:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=server.command[0],
            args=list(server.command[1:]),
            env=dict(server.env) if server.env is not None else None,
            cwd=server.cwd,
        )
        transport = stdio_client(params, errlog=stderr.file) if stderr is not None else stdio_client(params)
    else:
        import httpx
        from mcp.client import streamable_http as sh

        if hasattr(sh, "streamable_http_client"):  # mcp >= 1.24
            client = httpx.AsyncClient(headers=dict(server.headers), timeout=server.connect_timeout_s)
            transport = sh.streamable_http_client(server.url, http_client=client)
        else:  # pragma: no cover - older 1.x releases
            transport = sh.streamablehttp_client(server.url, headers=dict(server.headers))
    async with transport as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        yield session


class _Connection:
    """One MCP client session, held open by a task of its own (the SDK's transports are context
    managers that must be entered and left in one task)."""

    def __init__(self, server: MCPServer):
        self.server = server
        self.session: Any = None
        self.error: BaseException | None = None
        self.stderr = _Stderr() if server.command is not None else None
        self.stderr_tail: str | None = None  # what it wrote last, once it has exited
        self.last_used = time.monotonic()
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            async with _client_session(self.server, self.stderr) as session:
                self.session = session
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - kept and reported to the next call
            self.error = _leaf(exc)
            # cancellation, Ctrl-C and a signal handler's exception (a test's timeout) go on
            if not isinstance(exc, Exception | BaseExceptionGroup):
                raise
        finally:
            self.session = None
            if self.stderr is not None:
                self.stderr_tail = self.stderr.tail()
                self.stderr.close()
                if self.error is not None and self.stderr_tail.strip():
                    tail = self.stderr_tail[-_STDERR_TAIL:]
                    log.warning("%s ended; its stderr ends: %s", self.server.describe(), tail)
            self._ready.set()

    @property
    def alive(self) -> bool:
        return not self._task.done()

    async def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> Any:
        self.last_used = time.monotonic()
        try:
            await asyncio.wait_for(self._ready.wait(), self.server.connect_timeout_s)
        except TimeoutError:
            raise UpstreamTimeout(
                f"{self.server.describe()} did not start within {self.server.connect_timeout_s:g}s",
                component=COMPONENT,
            ) from None
        if self.session is None:
            raise _server_error(self.server, "could not be started or reached", self.error, self.stderr_tail)
        call = asyncio.ensure_future(self.session.call_tool(name, arguments))
        # Race the call against the connection: a server that exits fails the call at once.
        done, _ = await asyncio.wait({call, self._task}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        self.last_used = time.monotonic()
        if call in done:
            try:
                return call.result()
            except Exception as exc:  # noqa: BLE001 - a protocol-level failure, not a tool error
                raise _server_error(self.server, f"failed on tools/call {name}", _leaf(exc)) from None
        call.cancel()
        if self._task in done:
            raise _server_error(self.server, f"exited during tools/call {name}", self.error, self.stderr_tail)
        raise UpstreamTimeout(
            f"{self.server.describe()} did not answer tools/call {name} within {timeout_s:g}s", component=COMPONENT
        )

    async def aclose(self) -> None:
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), 5.0)
        except (TimeoutError, Exception):  # noqa: BLE001 - a stuck transport is cancelled instead
            self._task.cancel()


def _result_text(result: Any) -> str:
    parts = []
    for block in result.content or []:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else jsonutil.dumps_str(block.model_dump(mode="json")))
    if not parts and result.structuredContent is not None:
        parts.append(jsonutil.dumps_str(result.structuredContent))
    return "\n".join(parts) if parts else "ok"


class MCPToolsEnvironment(Environment):
    """Subclass it: set `name` and `server`, a `State` deriving from MCPSessionState, `seed` and
    `verify`. Options may also come as constructor arguments (`server=...`)."""

    server: ClassVar[MCPServer | None] = None
    tool_timeout_s: ClassVar[float] = 30.0
    idle_timeout_s: ClassVar[float] = 300.0  # a connection unused this long is closed
    max_connections: ClassVar[int] = 256  # live MCP sessions (stdio: processes) in this process
    reverify = "never"  # the server's state is gone once the session closes
    State = MCPSessionState

    def __init__(
        self,
        server: MCPServer | None = None,
        *,
        tool_timeout_s: float | None = None,
        idle_timeout_s: float | None = None,
    ):
        server = server or type(self).server
        if server is None:
            raise ValueError(f"{type(self).__name__}: set the class attribute `server` or pass server=MCPServer(...)")
        if not (isinstance(self.State, type) and issubclass(self.State, MCPSessionState)):
            raise TypeError(f"{type(self).__name__}.State must subclass MCPSessionState")
        self.server = server
        self.tool_timeout_s = tool_timeout_s or type(self).tool_timeout_s
        self.idle_timeout_s = idle_timeout_s or type(self).idle_timeout_s
        self._conns: dict[str, _Connection] = {}
        self._reaper: asyncio.Task | None = None
        self._specs = self._discover()

    def _discover(self) -> dict[str, MCPToolSpec]:
        import jsonschema

        stderr = _Stderr() if self.server.command is not None else None

        async def list_tools() -> list[Any]:
            async with _client_session(self.server, stderr) as session:
                return (await asyncio.wait_for(session.list_tools(), self.server.connect_timeout_s)).tools

        try:
            tools = run_sync(list_tools())
        except ImportError as exc:
            raise ImportError(
                f'MCP environments need the extra "interop" (pip install "rollgate[interop]"): {exc}'
            ) from exc
        except Exception as exc:
            tail = stderr.tail() if stderr is not None else None
            raise _server_error(self.server, "did not list its tools", _leaf(exc), tail) from None
        finally:
            if stderr is not None:
                stderr.close()
        specs: dict[str, MCPToolSpec] = {}
        self._validators: dict[str, Any] = {}
        for i, t in enumerate(tools):
            schema = dict(t.inputSchema or {"type": "object", "properties": {}})
            schema.setdefault("properties", {})
            self._validators[t.name] = jsonschema.Draft202012Validator(schema)
            specs[t.name] = bind_tool(self, f"_mcp_tool_{i}", self._call, t.name, t.description or "", schema)
        return specs

    tool_specs = _PerInstance(lambda env: {} if env is None else env._specs)  # type: ignore[assignment]
    tool_schemas = _PerInstance(  # type: ignore[assignment]
        lambda env: [] if env is None else [s.openai_schema() for s in env._specs.values()]
    )

    def seed(self, task: TaskRow, rng) -> BaseModel | tuple[BaseModel, str | None]:
        return self.State()

    # --- the session's MCP connection ---------------------------------------------------
    def _connection(self, state: MCPSessionState) -> _Connection:
        conn = self._conns.get(state.mcp_key)
        if conn is not None and conn.alive:
            return conn
        if conn is not None and conn.error is not None:
            self._conns.pop(state.mcp_key, None)
            raise _server_error(self.server, "exited or closed the connection", conn.error, conn.stderr_tail)
        if conn is not None or state.mcp_opened:
            # Never reopen silently: a stateful server would start this episode over.
            self._conns.pop(state.mcp_key, None)
            raise UpstreamError(
                f"{self.server.describe()}: this session's MCP connection is gone (it exited, was idle over "
                f"{self.idle_timeout_s:g}s, or was opened by another replica: sessions are pinned to one)",
                component=COMPONENT,
            )
        if len(self._conns) >= self.max_connections:
            raise UpstreamError(
                f"{self.server.describe()}: {self.max_connections} MCP sessions are open in this process",
                component=COMPONENT,
            )
        conn = self._conns[state.mcp_key] = _Connection(self.server)
        state.mcp_opened = True
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap())
        return conn

    async def _call(self, tool_name: str, state: MCPSessionState, root: dict[str, Any]) -> str:
        errors = sorted(self._validators[tool_name].iter_errors(root), key=lambda e: list(e.path))
        if errors:
            where = ".".join(str(p) for p in errors[0].path) or "arguments"
            raise ToolError(f"invalid arguments for {tool_name}: {where}: {errors[0].message}")
        result = await self._connection(state).call(tool_name, root, self.tool_timeout_s)
        text = _result_text(result)
        if result.isError:
            raise ToolError(text)
        return text

    async def call_server(self, state: MCPSessionState, tool_name: str, arguments: dict[str, Any]) -> str:
        """Call a server tool on the session's connection, e.g. from `verify` to read the
        server's state. A tool error raises ToolError."""
        return await self._call(tool_name, state, arguments)

    async def close_session(self, state: MCPSessionState) -> None:
        conn = self._conns.pop(state.mcp_key, None)
        if conn is not None:
            await conn.aclose()

    async def _reap(self) -> None:
        while self._conns:
            await asyncio.sleep(min(5.0, self.idle_timeout_s / 2))
            now = time.monotonic()
            for key, conn in list(self._conns.items()):
                if now - conn.last_used > self.idle_timeout_s or not conn.alive:
                    self._conns.pop(key, None)
                    await conn.aclose()

    async def aclose(self) -> None:
        """Close every connection (shutdown and tests)."""
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await conn.aclose()
        if self._reaper is not None:
            self._reaper.cancel()
