"""The resources server's native routes are served by the hot-route layer on a standalone server
and by FastAPI routes where they are mounted under a prefix (the gateway): both must answer the
same, byte for byte apart from session ids."""

from __future__ import annotations

import json
from typing import Any

import httpx
from fastapi import FastAPI

from rollgate.core.app import hot_route, make_app
from rollgate.core.session_store import MemorySessionStore
from rollgate.resources_servers.app import create_resources_app, env_router
from rollgate.resources_servers.base import EnvRuntime
from tests.resources.toy_env import CounterEnv

ROW = {"responses_create_params": {"input": "count"}, "target": 4}


def mounted_app() -> FastAPI:
    app = make_app("gateway-like", component="env:counter")
    app.include_router(env_router(EnvRuntime(CounterEnv(), MemorySessionStore())), prefix="/envs/counter")
    return app


async def conversation(c: httpx.AsyncClient, base: str) -> list[tuple[int, Any]]:
    """Every native route, good and bad calls; the answers with session ids blanked."""
    out: list[tuple[int, Any]] = []

    sid = ""

    def keep(r: httpx.Response) -> None:
        text = r.text.replace(sid, "<sid>").replace(sid[:8], "<sid>")
        out.append((r.status_code, text))

    r = await c.post(f"{base}/sessions", json=ROW)
    sid = r.json()["session_id"]
    keep(r)
    keep(await c.post(f"{base}/sessions/{sid}/tools/add", json={"arguments": {"amount": 4}}))
    keep(await c.post(f"{base}/sessions/{sid}/tools/add", json={"arguments": '{"amount": 9}'}))
    keep(await c.post(f"{base}/sessions/{sid}/tools/add", json=[1]))
    keep(await c.post(f"{base}/sessions/{sid}/tools/nope", json={"arguments": {}}))
    keep(await c.post(f"{base}/sessions/missing/tools/add", json={"arguments": {"amount": 1}}))
    keep(await c.post(f"{base}/sessions", content=b"{broken"))
    keep(await c.post(f"{base}/sessions/{sid}/verify", json={"response": 5}))
    keep(await c.post(f"{base}/sessions/{sid}/verify", content=b"not json"))
    keep(await c.post(f"{base}/sessions/{sid}/verify", content=b""))
    keep(await c.post(f"{base}/sessions/{sid}/verify", json={"response": "4", "transcript": []}))
    keep(await c.delete(f"{base}/sessions/{sid}"))
    keep(await c.post(f"{base}/sessions/{sid}/verify", json={}))
    return out


async def test_hot_routes_answer_exactly_like_the_fastapi_routes():
    standalone = create_resources_app(EnvRuntime(CounterEnv(), MemorySessionStore()))
    assert len(standalone.state.hot_routes) == 4
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=standalone), base_url="http://a") as a,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=mounted_app()), base_url="http://b") as b,
    ):
        hot = await conversation(a, "")
        routed = await conversation(b, "/envs/counter")
    assert hot == routed
    statuses = [s for s, _ in hot]
    assert statuses == [200, 200, 200, 400, 404, 404, 400, 422, 422, 422, 200, 204, 404]
    body = [json.loads(text) if text else None for _, text in hot]
    assert body[1] == {"output": "value=4", "is_error": False}
    assert body[2]["is_error"] is True  # 4 + 9 > 20 is an illegal action, told to the model
    assert body[7]["error"]["field"] == "response"
    assert body[10]["reward"] == 1.5


async def test_openapi_still_documents_the_hot_routes():
    app = create_resources_app(EnvRuntime(CounterEnv(), MemorySessionStore()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a") as c:
        spec = (await c.get("/openapi.json")).json()
    verify = spec["paths"]["/sessions/{session_id}/verify"]["post"]
    assert "transcript" in verify["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert "/sessions/{session_id}/tools/{tool_name}" in spec["paths"]
    assert "delete" in spec["paths"]["/sessions/{session_id}"]


async def test_a_crashing_hot_handler_is_a_typed_500_and_the_size_limit_still_applies():
    app = make_app("t", component="svc", max_body_bytes=100)

    async def crash(params: dict[str, str], body: bytes):
        raise RuntimeError(f"boom {params['x']}")

    hot_route(app, "POST", "/crash/{x}", crash)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://a"
    ) as c:
        r = await c.post("/crash/7", content=b"{}")
        assert r.status_code == 500
        assert r.json()["error"] == {"kind": "internal", "component": "svc", "message": "RuntimeError: boom 7"}
        r = await c.post("/crash/7", content=b"x" * 200)
        assert r.status_code == 413 and r.json()["error"]["field"] == "body"
        assert (await c.get("/crash/7")).status_code == 404  # other methods fall through to FastAPI
        assert (await c.post("/crash/7/more", content=b"{}")).status_code == 404
