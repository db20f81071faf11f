"""The gateway's WebSocket relay to environment replicas: OpenEnv's episode protocol
(`/envs/{env}/openenv/ws`) through the front door.

A connection is pinned to one replica for its whole life (the episode's bookkeeping lives in
that replica's process; the Rollgate session in the store they share). Replicas are tried in
round-robin order until one accepts the handshake, and the client's handshake is accepted only
then: a refusal reaches the client as a refused handshake, never as a socket that dies at once.
Frames pass unchanged, text and binary, both ways, until either side closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import WebSocket
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from rollgate.core.errors import NotFound
from rollgate.core.replicas import ReplicaSet

log = logging.getLogger("rollgate.proxy")

# 1008 policy violation: the handshake is refused (the server answers HTTP 403)
REFUSED = 1008


def ws_url(base: str, path: str, query: str) -> str:
    url = base.rstrip("/").replace("https://", "wss://", 1).replace("http://", "ws://", 1) + path
    return f"{url}?{query}" if query else url


def ws_relay(envs: dict[str, ReplicaSet], split, *, headers: dict[str, str], open_timeout_s: float = 5.0):
    """The endpoint of the WebSocket route `/envs/{target:path}`. `split(target, envs)` ->
    (env, path), as for the HTTP routes."""

    async def open_upstream(websocket: WebSocket, target: str) -> ClientConnection | None:
        try:
            env, path = split(target, envs)
        except NotFound as exc:
            await websocket.close(code=REFUSED, reason=exc.message[:120])
            return None
        query = websocket.url.query
        for base in envs[env].order():
            url = ws_url(base, "/" + path, query)
            try:
                # proxy=None: replicas are reached directly, like the HTTP forwarder's
                return await connect(
                    url, additional_headers=headers, open_timeout=open_timeout_s, max_size=None, proxy=None
                )
            except InvalidHandshake as exc:  # the replica answered and refused (e.g. no such route)
                log.warning("env %s replica %s refused the WebSocket %s: %s", env, base, path, exc)
                await websocket.close(code=REFUSED, reason=f"env:{env} refused the WebSocket: {exc}"[:120])
                return None
            except (OSError, TimeoutError) as exc:  # nothing reached it: the next replica may take it
                log.warning("env %s replica %s unreachable for WebSocket: %s", env, base, exc)
        await websocket.close(code=1011, reason=f"no env:{env} replica reachable ({', '.join(envs[env].urls)})"[:120])
        return None

    async def relay(websocket: WebSocket, target: str) -> None:
        upstream = await open_upstream(websocket, target)
        if upstream is None:
            return
        await websocket.accept()

        async def client_to_upstream() -> None:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                data = message.get("text")
                await upstream.send(data if data is not None else message.get("bytes") or b"")

        async def upstream_to_client() -> None:
            with contextlib.suppress(ConnectionClosed):
                async for data in upstream:
                    if isinstance(data, str):
                        await websocket.send_text(data)
                    else:
                        await websocket.send_bytes(data)

        tasks = [asyncio.create_task(client_to_upstream()), asyncio.create_task(upstream_to_client())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # closing upstream ends the replica's episode (its session is deleted there)
            await upstream.close()
            code = upstream.close_code
            with contextlib.suppress(Exception):  # 1005 and 1006 are never sent in a close frame
                await websocket.close(code=code if code and code not in (1005, 1006) else 1000)

    return relay
