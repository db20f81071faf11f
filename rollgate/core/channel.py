"""A multiplexed internal channel: the hot routes of a service over one WebSocket per upstream.

On the cluster shape every model call and tool call was an HTTP request of its own, and the
per-request work of the HTTP client and server (headers, connection pool, timers, parsing) was
most of the agent's CPU (docs/benchmarks.md, "Where the CPU goes"). It also held one socket per
open episode per hop, which caps open episodes at the process's file limit. Over the channel,
requests are binary frames on a few long-lived connections, answered out of order.

Only hot routes are served here (core/app.py `hot_route`): the very handlers the HTTP routes
call, so both ways answer alike, errors included. Anything else (a streamed answer, an unknown
path) is answered with the same error body HTTP would give. A client whose upstream does not
speak the channel (vLLM, an older Rollgate, a proxy that refuses WebSockets) falls back to HTTP.

Frames (binary; integers big-endian):
    request   id:u32 method:u8 path_len:u16 path hdr_len:u16 headers(JSON object) body
    response  id:u32 status:u16 body
Each WebSocket message carries one or more frames, each prefixed by its length (u32): the frames
one side writes in one turn of its event loop go out as one message, one write system call (at a
few hundred episodes in flight, the writes were a fifth of both sides' CPU).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rollgate.core import jsonutil
from rollgate.core.batching import TurnBatch
from rollgate.core.errors import UpstreamError, UpstreamTimeout

if TYPE_CHECKING:
    import aiohttp
    from starlette.types import Receive, Send

log = logging.getLogger("rollgate.channel")

CHANNEL_PATH = "/_rollgate/channel"
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")
_METHOD_CODE = {m: i for i, m in enumerate(METHODS)}
_REQ = struct.Struct("!IBH")
_LEN = struct.Struct("!H")
_RESP = struct.Struct("!IH")
_FRAME = struct.Struct("!I")


def join_frames(frames: list[bytes]) -> bytes:
    return b"".join(b for f in frames for b in (_FRAME.pack(len(f)), f))


def split_frames(message: bytes) -> list[bytes]:
    out, at, end = [], 0, len(message)
    while at < end:
        (n,) = _FRAME.unpack_from(message, at)
        at += _FRAME.size
        if at + n > end:
            raise ValueError("truncated frame")
        out.append(message[at : at + n])
        at += n
    return out


def outbox(write: Callable[[bytes], Any], on_error: Callable[[list[bytes], BaseException], None]) -> TurnBatch[bytes]:
    """Frames written during one loop turn, sent as one message (`write`, async) on the next."""

    async def send(frames: list[bytes]) -> None:
        try:
            await write(join_frames(frames))
        except Exception as exc:  # noqa: BLE001 - the connection broke: fail what it carried
            on_error(frames, exc)

    return TurnBatch(send)


NOT_HERE = 421  # the answer when no hot route serves a path: the client sends it over HTTP instead
MAX_MISSES = 8  # paths answered NOT_HERE, with none served, before a client stops trying the channel
MAX_IN_FLIGHT = 65536  # per connection, on the server: past it the server stops reading (backpressure)


def pack_request(rid: int, method: str, path: str, body: bytes, headers: dict[str, str] | None) -> bytes:
    p = path.encode()
    h = jsonutil.dumps(headers) if headers else b""
    return b"".join((_REQ.pack(rid, _METHOD_CODE[method], len(p)), p, _LEN.pack(len(h)), h, body))


def unpack_request(frame: bytes) -> tuple[int, str, str, list[tuple[bytes, bytes]], bytes]:
    rid, code, plen = _REQ.unpack_from(frame)
    at = _REQ.size
    path = frame[at : at + plen].decode()
    at += plen
    (hlen,) = _LEN.unpack_from(frame, at)
    at += _LEN.size
    headers = (
        [(k.lower().encode(), str(v).encode()) for k, v in jsonutil.loads(frame[at : at + hlen]).items()]
        if hlen
        else []
    )
    return rid, METHODS[code], path, headers, frame[at + hlen :]


# --- server ------------------------------------------------------------------------------------


async def serve_channel(
    respond: Callable[[str, str, bytes, list[tuple[bytes, bytes]]], Any], receive: Receive, send: Send
) -> None:
    """Serve one channel connection (an ASGI websocket scope). `respond(method, path, body,
    headers)` answers one request with (status, body bytes), never raising."""
    if (await receive())["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    slots = asyncio.Semaphore(MAX_IN_FLIGHT)
    running: set[asyncio.Task] = set()
    open_ = True

    async def write(message: bytes) -> None:
        if open_:
            await send({"type": "websocket.send", "bytes": message})

    # the client went away: nobody to answer
    answers = outbox(write, lambda frames, exc: log.debug("channel: %d answers undelivered: %s", len(frames), exc))

    async def one(rid: int, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        try:
            status, out = await respond(method, path, body, headers)
            answers.put(_RESP.pack(rid, status) + out)
        finally:
            slots.release()

    try:
        while True:
            message = await receive()
            kind = message["type"]
            if kind == "websocket.receive":
                data = message.get("bytes")
                try:
                    if data is None:
                        raise ValueError("a text message")
                    requests = [unpack_request(f) for f in split_frames(data)]
                except (struct.error, UnicodeDecodeError, ValueError, IndexError) as exc:
                    log.warning("channel: a malformed message (%s); closing the connection", exc)
                    await send({"type": "websocket.close", "code": 1003, "reason": "malformed channel message"})
                    return
                for request in requests:
                    await slots.acquire()
                    task = asyncio.get_running_loop().create_task(one(*request))
                    running.add(task)
                    task.add_done_callback(running.discard)
            elif kind == "websocket.disconnect":
                return
    finally:
        # Like an HTTP request whose client disconnected, a started handler runs to its end (a
        # tool call is never cut half-way); only its answer is dropped.
        open_ = False


# --- client ------------------------------------------------------------------------------------


class Channel:
    """The client side: one WebSocket to `base_url`'s channel, opened on first use and reopened
    after it drops. Requests in flight when it drops fail as a transport error (not retried
    unless idempotent: the server may have run them)."""

    def __init__(self, base_url: str, *, component: str, headers: dict[str, str] | None = None):
        parts = urlsplit(base_url.rstrip("/"))
        self.url = f"{parts.scheme}://{parts.netloc}{CHANNEL_PATH}"  # one channel per server
        self.prefix = parts.path  # e.g. /envs/math: part of every request's path
        self.component = component
        self.headers = {k: v for k, v in (headers or {}).items() if k.lower() != "content-type"}
        self.usable = True  # False once the upstream refused the handshake: the caller uses HTTP
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task | None = None
        self._connecting: asyncio.Lock | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._next = 0
        self._hits = self._misses = 0
        self._outbox: TurnBatch[bytes] | None = None
        self._outbox_ws: aiohttp.ClientWebSocketResponse | None = None

    async def _connect(self, session: aiohttp.ClientSession) -> aiohttp.ClientWebSocketResponse:
        import aiohttp

        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._ws is not None and not self._ws.closed:
                return self._ws
            try:
                ws = await session.ws_connect(
                    self.url, headers=self.headers, max_msg_size=0, compress=0, autoping=True, heartbeat=None
                )
            except aiohttp.WSServerHandshakeError as exc:
                self.usable = False
                log.info("%s does not speak the channel (HTTP %s): using plain HTTP", self.url, exc.status)
                raise Refused from None
            except (aiohttp.ClientError, OSError) as exc:
                err = UpstreamError(f"cannot connect to {self.url}: {exc}", component=self.component, transient=True)
                err.not_sent = True  # type: ignore[attr-defined]
                raise err from None
            self._ws = ws
            self._reader = asyncio.get_running_loop().create_task(self._read(ws))
            return ws

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        import aiohttp

        try:
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.BINARY:
                    continue
                for frame in split_frames(msg.data):
                    rid, status = _RESP.unpack_from(frame)
                    fut = self._pending.pop(rid, None)
                    if fut is not None and not fut.done():
                        fut.set_result((status, frame[_RESP.size :]))
        except Exception as exc:  # noqa: BLE001 - any read failure ends this connection
            log.debug("channel %s: read failed: %s", self.url, exc)
        finally:
            if self._ws is ws:
                self._ws = None
            pending, self._pending = self._pending, {}
            for fut in pending.values():
                if not fut.done():
                    fut.set_exception(
                        UpstreamError(f"{self.url}: the connection closed", component=self.component, transient=True)
                    )

    async def request(
        self,
        session: aiohttp.ClientSession,
        method: str,
        path: str,
        body: bytes,
        timeout_s: float,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        ws = self._ws
        if ws is None or ws.closed:
            # The handshake counts against the call's deadline too: a stalled upstream accepts
            # the connection and never answers it (aiohttp's own bound is 5 minutes).
            try:
                async with asyncio.timeout(timeout_s):
                    ws = await self._connect(session)
            except TimeoutError:
                raise UpstreamTimeout(
                    f"{self.url}: no WebSocket handshake within {timeout_s:g}s", component=self.component
                ) from None
        self._next = rid = (self._next + 1) & 0xFFFFFFFF
        loop = asyncio.get_running_loop()
        fut = self._pending[rid] = loop.create_future()
        timer = loop.call_later(timeout_s, self._expire, rid, method, path, timeout_s)
        if self._outbox is None or self._outbox_ws is not ws:
            self._outbox, self._outbox_ws = outbox(ws.send_bytes, self._unsent), ws
        self._outbox.put(pack_request(rid, method, self.prefix + path, body, headers))
        try:
            status, out = await fut
        finally:
            timer.cancel()
        if status == NOT_HERE:  # no hot route for this path there: nothing ran, HTTP serves it
            self._misses += 1
            if self._misses >= MAX_MISSES and not self._hits:  # e.g. a family's /envs/<name>/...
                self.usable = False
                log.info("%s serves none of %s's paths over the channel: using plain HTTP", self.url, self.prefix)
            raise Refused
        self._hits += 1
        return status, out

    def _unsent(self, frames: list[bytes], exc: BaseException) -> None:
        for frame in frames:
            (rid,) = _FRAME.unpack_from(frame)  # a request frame starts with its id
            fut = self._pending.pop(rid, None)
            if fut is not None and not fut.done():
                err = UpstreamError(f"{self.url}: sending failed: {exc}", component=self.component, transient=True)
                err.not_sent = True  # type: ignore[attr-defined]
                fut.set_exception(err)

    def _expire(self, rid: int, method: str, path: str, timeout_s: float) -> None:
        fut = self._pending.pop(rid, None)
        if fut is not None and not fut.done():
            fut.set_exception(
                UpstreamTimeout(f"{method} {path} took longer than {timeout_s:g}s", component=self.component)
            )

    async def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            await ws.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader


class Refused(Exception):
    """The upstream refused the channel's handshake: use HTTP."""
