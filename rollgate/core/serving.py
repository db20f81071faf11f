"""Run an ASGI app: in the foreground (`rollgate serve`), or on a background thread (tests,
benchmarks and embedded tools that need real HTTP on loopback)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import uvicorn

# Longer than any Rollgate client keeps an idle connection (core/http.py: 15 s), so a client never
# sends on a connection the server is closing; long-waiting episodes idle their env connections.
SERVER_KEEPALIVE_S = 75


def uvicorn_config(app, host: str, port: int, *, log_level: str = "warning") -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        loop="uvloop",
        http="httptools",
        timeout_keep_alive=SERVER_KEEPALIVE_S,
        backlog=4096,
        lifespan="on",
    )


def serve_forever(app, host: str, port: int, *, log_level: str = "info") -> None:
    uvicorn.Server(uvicorn_config(app, host, port, log_level=log_level)).run()


def listening_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A bound TCP socket (port 0: any free port) for `serve_in_thread(sock=...)`. Its port is known
    before the app is built, and since the server serves this very socket, no other process can
    take the port in between (binding, closing and re-binding a port can lose it)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


@contextlib.contextmanager
def serve_in_thread(
    app, host: str = "127.0.0.1", port: int = 0, *, timeout_s: float = 20.0, sock: socket.socket | None = None
) -> Iterator[str]:
    """Serve `app` on a daemon thread with its own event loop; yield its base URL. With `sock`
    (listening_socket()), serve on that socket instead of binding host:port."""
    if sock is not None:
        host, port = sock.getsockname()[:2]
    config = uvicorn_config(app, host, port)
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    sockets = [sock] if sock is not None else None
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=sockets)), daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"server on {host}:{port} did not start within {timeout_s}s")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
