"""HttpClient's per-call timeout bounds the whole call (headers and body, retries included), over
real loopback HTTP, and only idempotent calls are retried after a 5xx answer."""

from __future__ import annotations

import asyncio
import time

import pytest

from rollgate.core.errors import UpstreamError, UpstreamTimeout
from rollgate.core.http import HttpClient, RetryPolicy
from rollgate.core.serving import serve_in_thread


class SlowApp:
    """/slow-headers waits before answering; /slow-body sends headers and half a body, then waits."""

    def __init__(self) -> None:
        self.hits: dict[str, int] = {}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        self.hits[path] = self.hits.get(path, 0) + 1
        while (await receive()).get("more_body"):
            pass
        if path == "/slow-headers":
            await asyncio.sleep(1.5)
        if path == "/unavailable":
            await send({"type": "http.response.start", "status": 502, "headers": []})
            await send({"type": "http.response.body", "body": b'{"error": {"message": "busy"}}'})
            return
        start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
        await send(start)
        if path == "/slow-body":
            await send({"type": "http.response.body", "body": b'{"ok": ', "more_body": True})
            await asyncio.sleep(1.5)
        await send({"type": "http.response.body", "body": b'{"ok": true}' if path != "/slow-body" else b"true}"})


@pytest.fixture(scope="module")
def slow_server():
    app = SlowApp()
    with serve_in_thread(app) as url:
        yield app, url


@pytest.mark.parametrize("path", ["/slow-headers", "/slow-body"])
async def test_timeout_bounds_headers_and_body(slow_server, path):
    app, url = slow_server
    client = HttpClient(url, component="svc", retry=RetryPolicy(attempts=1))
    try:
        assert await client.request("POST", "/fast", {"x": 1}, timeout_s=1.0) == {"ok": True}
        t = time.monotonic()
        with pytest.raises(UpstreamTimeout) as info:
            await client.request("POST", path, {"x": 1}, timeout_s=0.3)
        took = time.monotonic() - t
    finally:
        await client.close()
    assert 0.25 <= took < 1.2  # at the deadline, not when the server finally answers (1.5 s)
    assert info.value.component == "svc" and "0.3s" in info.value.message


async def test_a_timed_out_call_is_not_resent_its_deadline_is_spent(slow_server):
    app, url = slow_server
    client = HttpClient(url, component="svc", retry=RetryPolicy(attempts=3, backoff_s=0.01))
    try:
        before = app.hits.get("/slow-headers", 0)
        t = time.monotonic()
        with pytest.raises(UpstreamTimeout):
            await client.request("POST", "/slow-headers", {}, timeout_s=0.2, idempotent=True)
        took = time.monotonic() - t
    finally:
        await client.close()
    assert app.hits["/slow-headers"] - before == 1 and took < 0.5  # one deadline, not 3 x 0.2 s


async def test_5xx_answers_are_retried_only_for_idempotent_calls(slow_server):
    app, url = slow_server
    retried = []
    client = HttpClient(
        url, component="svc", retry=RetryPolicy(attempts=3, backoff_s=0.01, on_retry=lambda: retried.append(1))
    )
    try:
        before = app.hits.get("/unavailable", 0)
        with pytest.raises(UpstreamError):
            await client.request("POST", "/unavailable", {}, timeout_s=2.0)  # e.g. a tool call
        once = app.hits["/unavailable"] - before
        with pytest.raises(UpstreamError):
            await client.request("POST", "/unavailable", {}, timeout_s=2.0, idempotent=True)
        thrice = app.hits["/unavailable"] - before - once
    finally:
        await client.close()
    assert (once, thrice) == (1, 3)
    assert len(retried) == 2  # every retry is reported (the agent counts them in rollgate_retries_total)


async def test_send_hands_back_any_status_and_times_out_like_request(slow_server):
    app, url = slow_server
    client = HttpClient(url, component="svc", retry=RetryPolicy(attempts=3, backoff_s=0.01))
    try:
        reply = await client.send("POST", "/unavailable", data=b"raw")
        assert reply.status == 502 and reply.json() == {"error": {"message": "busy"}}  # the caller judges it
        before = app.hits["/slow-body"]
        t = time.monotonic()
        with pytest.raises(UpstreamTimeout) as info:
            await client.send("GET", "/slow-body", timeout_s=0.3, idempotent=True)
        took = time.monotonic() - t
    finally:
        await client.close()
    assert app.hits["/slow-body"] - before == 1 and took < 0.8  # one deadline for the call, retries included
    assert info.value.component == "svc"


async def test_open_bounds_each_wait_for_data_not_the_whole_answer(slow_server):
    _, url = slow_server
    patient = HttpClient(url, component="svc", timeout_s=3.0, connect_timeout_s=1.0)
    hasty = HttpClient(url, component="svc", timeout_s=0.3)
    try:
        streamed = await patient.open("POST", "/slow-body", data=b"{}")
        assert streamed.status == 200
        assert b"".join([c async for c in streamed.chunks()]) == b'{"ok": true}'  # 1.5 s in all, 2 pieces
        await streamed.aclose()
        stalled = await hasty.open("POST", "/slow-body", data=b"{}")  # the headers come at once
        with pytest.raises(UpstreamTimeout) as info:
            await stalled.read()
        await stalled.aclose()
    finally:
        await patient.close()
        await hasty.close()
    assert info.value.component == "svc" and "0.3s" in info.value.message
