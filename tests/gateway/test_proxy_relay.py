"""The gateway's proxy (gateway/proxy.py) over real loopback HTTP: an SSE stream is relayed as
it arrives, not buffered; path, query, body, status and headers pass as the upstream and the
caller sent them, with the gateway's token in place of the caller's and no cookie kept between
callers; a replica that refuses the
connection is skipped; a stalled upstream is a 504 and no reachable replica a 502, each naming
the component."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from rollgate.core import jsonutil
from rollgate.core.app import make_app
from rollgate.core.replicas import ReplicaSet
from rollgate.core.serving import serve_in_thread
from rollgate.gateway.proxy import Forwarder, proxy_router
from tests.conftest import free_port


class Upstream:
    """/sse: one event, then a second only once the test has read the first (or after 5 s);
    /hang: headers after 3 s; anything else: what it received, as JSON, with two cookies."""

    def __init__(self) -> None:
        self.first_read = threading.Event()
        self.second_waited_s: float | None = None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        if scope["path"] == "/sse":
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
            )
            await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
            t = time.monotonic()
            released = await asyncio.to_thread(self.first_read.wait, 5.0)
            self.second_waited_s = time.monotonic() - t if released else None
            await send({"type": "http.response.body", "body": b"data: 2\n\n"})
            return
        if scope["path"] == "/hang":
            await asyncio.sleep(3.0)
        seen = {
            "method": scope["method"],
            "raw_path": scope["raw_path"].decode(),
            "query": scope["query_string"].decode(),
            "headers": {k.decode(): v.decode() for k, v in scope["headers"]},
            "body": body.decode(),
        }
        headers = [
            (b"content-type", b"application/json"),
            (b"set-cookie", b"a=1; Path=/"),
            (b"set-cookie", b"b=2; Path=/"),
            (b"x-upstream", b"yes"),
        ]
        await send({"type": "http.response.start", "status": 201, "headers": headers})
        await send({"type": "http.response.body", "body": jsonutil.dumps(seen)})


@pytest.fixture(scope="module")
def upstream():
    app = Upstream()
    with serve_in_thread(app) as url:
        yield app, url


def gateway_app(replicas: list[str], **forwarder_kw):
    forwarder = Forwarder(api_key="gw-token", **forwarder_kw)
    app = make_app("test gateway", component="gateway")
    app.include_router(proxy_router(forwarder, model=None, envs={"relay": ReplicaSet(replicas, what="env relay")}))
    app.router.on_shutdown.append(forwarder.aclose)
    return app


def test_an_sse_stream_is_relayed_as_it_arrives(upstream):
    app, url = upstream
    app.first_read.clear()
    with (
        serve_in_thread(gateway_app([url])) as front,
        httpx.Client(timeout=10) as client,
        client.stream("POST", front + "/envs/relay/sse", json={}) as resp,
    ):
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        lines = resp.iter_lines()
        assert next(x for x in lines if x) == "data: 1"
        app.first_read.set()  # the upstream sends the second event only now
        assert next(x for x in lines if x) == "data: 2"
    # a buffering proxy would have held event 1 until the upstream gave up waiting (5 s)
    assert app.second_waited_s is not None and app.second_waited_s < 4.0


def test_path_query_body_status_and_headers_pass_through(upstream):
    _, url = upstream
    with serve_in_thread(gateway_app([url])) as front:
        resp = httpx.put(
            front + "/envs/relay/files/a%20b?x=1&y=%2F&z=a+b",
            content=b"raw bytes",
            headers={"authorization": "Bearer callers-own", "content-type": "text/plain", "x-trace": "t1"},
            timeout=10,
        )
        # the cookies that answer set are the caller's: they never ride on the next caller's request
        after = httpx.get(front + "/envs/relay/ping", timeout=10).json()
    assert "cookie" not in after["headers"] and "content-type" not in after["headers"]  # none invented either
    assert resp.status_code == 201
    seen = resp.json()
    assert seen["method"] == "PUT" and seen["raw_path"] == "/files/a%20b"
    assert seen["query"] == "x=1&y=%2F&z=a+b" and seen["body"] == "raw bytes"
    sent = seen["headers"]
    assert sent["authorization"] == "Bearer gw-token"  # the gateway's token, never the caller's
    assert sent["content-type"] == "text/plain" and sent["x-trace"] == "t1" and sent["content-length"] == "9"
    assert resp.headers.get_list("set-cookie") == ["a=1; Path=/", "b=2; Path=/"]
    assert resp.headers["x-upstream"] == "yes" and int(resp.headers["content-length"]) == len(resp.content)


def test_a_refused_replica_is_skipped_and_none_reachable_is_a_502(upstream):
    _, url = upstream
    dead = f"http://127.0.0.1:{free_port()}"
    with serve_in_thread(gateway_app([dead, url])) as front:
        # round robin: one of the two calls starts at the dead replica and moves on
        for _ in range(2):
            assert httpx.get(front + "/envs/relay/ping", timeout=10).status_code == 201
    with serve_in_thread(gateway_app([dead])) as front:
        resp = httpx.get(front + "/envs/relay/ping", timeout=10)
    assert resp.status_code == 502
    err = resp.json()["error"]
    assert err["component"] == "env:relay" and "no env:relay replica reachable" in err["message"]


def test_a_stalled_upstream_is_a_504_naming_the_component(upstream):
    _, url = upstream
    with serve_in_thread(gateway_app([url], timeout_s=0.5)) as front:
        t = time.monotonic()
        resp = httpx.post(front + "/envs/relay/hang", json={}, timeout=10)
        took = time.monotonic() - t
    assert resp.status_code == 504 and resp.json()["error"]["component"] == "env:relay"
    assert took < 2.5, f"the 0.5 s timeout took {took:.1f}s"
