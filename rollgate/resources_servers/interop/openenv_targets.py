"""Where an OpenEnv episode runs, and the dict-level protocol both places speak (OpenEnv's own):
`reset(data)` and `step(action)` answer `{"observation": {...}, "reward": r, "done": d}`, so the
environment above (openenv_env.py) does not care which one it drives.

- `OpenEnvServer(url)` (here): a running OpenEnv server, one WebSocket (`/ws`) per episode, JSON
  frames `{"type": "reset" | "step" | "close", "data": ...}` answered by `{"type": "observation" |
  "error", "data": ...}`; the Action's schema from `GET /schema`. Nothing of the `openenv`
  package is imported: only `websockets` (uvicorn[standard] brings it) and httpx.
- `OpenEnvClass(module:Class)` (openenv_local.py): an Environment class in this process.

Every failure is an `UpstreamError` (`ProtocolError` for a malformed answer) naming the server's
URL or the class, component "openenv"; an action the environment rejects as invalid is
`ActionRejected`, which the model reads as an error output.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from rollgate.core import jsonutil
from rollgate.core.errors import ProtocolError, UpstreamError, UpstreamTimeout

COMPONENT = "openenv"
Result = dict[str, Any]  # {"observation": {...}, "reward": float | None, "done": bool}


class ActionRejected(Exception):
    """The environment refused the action's fields (its pydantic validation): the model's error."""


def _errors_text(errors: Any) -> str:
    """OpenEnv's VALIDATION_ERROR carries pydantic's `errors()`: name the fields."""
    if not isinstance(errors, list):
        return "the action does not match the environment's schema"
    parts = []
    for e in errors[:5]:
        if isinstance(e, dict):
            loc = ".".join(str(x) for x in e.get("loc", ())) or "action"
            parts.append(f"{loc}: {e.get('msg')}")
    return "; ".join(parts) or "the action does not match the environment's schema"


# --- a running OpenEnv server ------------------------------------------------------------------
class OpenEnvServer:
    def __init__(self, url: str, *, connect_timeout_s: float = 10.0):
        self.url = url.rstrip("/")
        scheme, rest = self.url.split("://", 1)
        self.ws_url = f"{'wss' if scheme in ('https', 'wss') else 'ws'}://{rest}/ws"
        self.http_url = f"{'https' if scheme in ('https', 'wss') else 'http'}://{rest}"
        self.connect_timeout_s = connect_timeout_s

    def describe(self) -> str:
        return f"OpenEnv server {self.url}"

    def action_schema(self) -> dict[str, Any]:
        """The Action's JSON Schema, from `GET /schema` (start-up: blocking is fine here)."""
        import httpx

        try:
            resp = httpx.get(f"{self.http_url}/schema", timeout=self.connect_timeout_s)
        except httpx.HTTPError as exc:
            raise UpstreamError(
                f"{self.describe()} cannot be reached ({type(exc).__name__}: {exc})", component=COMPONENT
            ) from None
        if resp.status_code != 200:
            raise UpstreamError(
                f"{self.describe()} answered GET /schema with HTTP {resp.status_code}",
                component=COMPONENT,
                status=resp.status_code,
            )
        try:
            body = resp.json()
        except ValueError:
            body = None
        action = body.get("action") if isinstance(body, dict) else None
        if not isinstance(action, dict) or action.get("type", "object") != "object":
            raise ProtocolError(
                f"{self.describe()} answered GET /schema without an action object schema: {resp.text[:200]!r}",
                component=COMPONENT,
            )
        return action

    async def open(self) -> _SocketEpisode:
        from websockets.asyncio.client import connect

        try:
            ws = await connect(self.ws_url, open_timeout=self.connect_timeout_s, max_size=64 * 2**20)
        except TimeoutError:
            raise UpstreamTimeout(
                f"{self.describe()} did not open a WebSocket within {self.connect_timeout_s:g}s", component=COMPONENT
            ) from None
        except Exception as exc:  # noqa: BLE001 - refused, DNS, handshake: all "cannot be reached"
            raise UpstreamError(
                f"{self.describe()} cannot be reached at {self.ws_url} ({type(exc).__name__}: {exc})",
                component=COMPONENT,
                transient=True,
            ) from None
        return _SocketEpisode(self, ws)


async def _last_frame(ws: Any) -> Any:
    """A frame the server sent before it closed the connection, if one is still unread."""
    with contextlib.suppress(Exception):
        return await asyncio.wait_for(ws.recv(), 0.5)
    return None


class _SocketEpisode:
    """One OpenEnv episode: one WebSocket, one request in flight at a time."""

    def __init__(self, server: OpenEnvServer, ws: Any):
        self.server = server
        self.ws = ws
        self.broken: str | None = None  # why the connection cannot be used any more
        self._lock = asyncio.Lock()

    @property
    def alive(self) -> bool:
        return self.broken is None

    async def reset(self, data: dict[str, Any], timeout_s: float) -> Result:
        return await self._request({"type": "reset", "data": data}, "reset", timeout_s)

    async def step(self, action: dict[str, Any], timeout_s: float) -> Result:
        return await self._request({"type": "step", "data": action}, "step", timeout_s)

    async def _request(self, frame: dict[str, Any], what: str, timeout_s: float) -> Result:
        from websockets.exceptions import ConnectionClosed

        desc = self.server.describe()
        async with self._lock:
            if self.broken is not None:
                raise UpstreamError(f"{desc}: this episode's WebSocket is gone ({self.broken})", component=COMPONENT)
            try:
                await self.ws.send(json.dumps(frame))
                raw = await asyncio.wait_for(self.ws.recv(), timeout_s)
            except asyncio.CancelledError:
                # its answer may still come, and would be read as the next request's: give up the socket
                self.broken = f"cancelled during {what}"
                raise
            except TimeoutError:
                self.broken = f"no answer to {what} within {timeout_s:g}s"
                await self.aclose()
                raise UpstreamTimeout(
                    f"{desc} did not answer {what} within {timeout_s:g}s", component=COMPONENT
                ) from None
            except ConnectionClosed as exc:
                self.broken = f"closed during {what}"
                # A server that refuses the session (CAPACITY_REACHED, FACTORY_ERROR) says why in a
                # frame and closes at once, often before our request is sent: read that frame.
                last = await _last_frame(self.ws)
                if last is not None:
                    self._answer(last, what)
                raise UpstreamError(
                    f"{desc} closed the WebSocket during {what} (code {exc.rcvd.code if exc.rcvd else 'none'}): "
                    "the server stopped or dropped the session",
                    component=COMPONENT,
                ) from None
            except OSError as exc:
                self.broken = f"{type(exc).__name__} during {what}"
                raise UpstreamError(
                    f"{desc} failed during {what}: {type(exc).__name__}: {exc}", component=COMPONENT
                ) from None
        return self._answer(raw, what)

    def _answer(self, raw: Any, what: str) -> Result:
        desc = self.server.describe()
        try:
            msg = json.loads(raw)
        except (TypeError, ValueError):
            msg = None
        kind = msg.get("type") if isinstance(msg, dict) else None
        data = msg.get("data") if isinstance(msg, dict) else None
        if kind == "error" and isinstance(data, dict):
            code = str(data.get("code", ""))
            full = code == "CAPACITY_REACHED"
            if code == "VALIDATION_ERROR" and what == "step":
                raise ActionRejected(_errors_text(data.get("errors")))
            if full:
                raise UpstreamError(
                    f"{desc} at capacity (CAPACITY_REACHED): {data.get('message', '')} Raise the server's "
                    "max_concurrent_envs (more than 1 needs SUPPORTS_CONCURRENT_SESSIONS = True on the "
                    "environment class) or lower Rollgate's concurrency",
                    component=COMPONENT,
                    transient=True,
                )
            raise UpstreamError(
                f"{desc} answered {what} with error {code or '(no code)'}: {data.get('message', '')}",
                component=COMPONENT,
            )
        if kind != "observation" or not isinstance(data, dict) or not isinstance(data.get("observation"), dict):
            self.broken = f"malformed answer to {what}"
            raise ProtocolError(
                f"{desc} answered {what} with a frame that is not an OpenEnv observation: {str(raw)[:200]!r}",
                component=COMPONENT,
            )
        return data

    async def aclose(self) -> None:
        self.broken = self.broken or "closed"
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.send(json.dumps({"type": "close"})), 1.0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(), 2.0)


# --- what the model reads ------------------------------------------------------------------------
def observation_text(obs: dict[str, Any]) -> str | None:
    """The observation's own fields as the model reads them (metadata only when it has nothing else)."""
    fields = {k: v for k, v in obs.items() if k not in ("metadata", "reward", "done")}
    if not fields:
        fields = obs.get("metadata") or {}
    if not fields:
        return None
    if len(fields) == 1 and isinstance(only := next(iter(fields.values())), str):
        return only
    return jsonutil.dumps_str(fields)


def _block_text(block: Any) -> str:
    text = block.get("text") if isinstance(block, dict) else None
    return text if isinstance(text, str) else jsonutil.dumps_str(block)


def call_tool_text(obs: dict[str, Any]) -> tuple[str, bool]:
    """A CallToolObservation as (text, is_error): the MCP result's text blocks, or its error."""
    error = obs.get("error")
    if error:
        return str(error.get("message") if isinstance(error, dict) else error), True
    result = obs.get("result")
    if isinstance(result, dict):
        blocks = result.get("content") if isinstance(result.get("content"), list) else []
        texts = [_block_text(b) for b in blocks]
        structured = result.get("structured_content") or result.get("data")
        if not texts and structured is not None:
            texts = [jsonutil.dumps_str(structured)]
        return "\n".join(texts) or "ok", bool(result.get("is_error") or result.get("isError"))
    if result is None:
        return "ok", False
    return (result if isinstance(result, str) else jsonutil.dumps_str(result)), False
