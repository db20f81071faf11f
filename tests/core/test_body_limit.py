"""The body limit of every service (rollgate.core.app.BodySizeLimit) holds for a streamed
(chunked) body as for a declared one, on FastAPI routes and hot routes alike, and answers 413
as soon as the limit is passed: the rest of the body is never read into the app."""

from __future__ import annotations

import httpx
import pytest
from fastapi import Request
from fastapi.responses import Response

from rollgate.core.app import hot_route, make_app
from rollgate.core.serving import serve_in_thread

LIMIT = 1024 * 1024


@pytest.fixture(scope="module")
def url():
    app = make_app("limits", component="test", max_body_bytes=LIMIT)

    @app.api_route("/plain", methods=["GET", "POST"])
    async def plain(request: Request) -> dict:
        body = await request.body()
        return {"bytes": len(body)}

    async def hot(params: dict, body: bytes) -> Response:
        return Response(str(len(body)))

    hot_route(app, "POST", "/hot", hot)
    with serve_in_thread(app) as base:
        yield base


def chunks(total: int, size: int = 64 * 1024):
    for _ in range(total // size):
        yield b"x" * size


@pytest.mark.parametrize("path", ["/plain", "/hot"])
def test_a_chunked_body_past_the_limit_is_a_413_naming_the_body(url, path):
    resp = httpx.post(url + path, content=chunks(8 * LIMIT), timeout=30)
    assert resp.status_code == 413, resp.text
    error = resp.json()["error"]
    assert error["field"] == "body" and f"limit of {LIMIT}" in error["message"]


@pytest.mark.parametrize("path", ["/plain", "/hot"])
def test_a_chunked_body_within_the_limit_is_read_whole(url, path):
    resp = httpx.post(url + path, content=chunks(LIMIT), timeout=30)
    assert resp.status_code == 200 and str(LIMIT) in resp.text


def test_a_declared_body_past_the_limit_is_refused_before_it_is_read(url):
    resp = httpx.post(url + "/plain", content=b"x" * (LIMIT + 1), timeout=30)
    assert resp.status_code == 413 and f"request body of {LIMIT + 1} bytes" in resp.json()["error"]["message"]


def test_a_chunked_body_on_a_get_is_counted_too(url):
    # a GET has no body unless it says so: one sent chunked is still bounded
    resp = httpx.request("GET", url + "/plain", content=chunks(8 * LIMIT), timeout=30)
    assert resp.status_code == 413, resp.text
