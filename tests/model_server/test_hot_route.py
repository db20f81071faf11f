"""POST /v1/responses is served by the hot-route layer on a standalone model server and by its
FastAPI route where the gateway mounts the model routes: both must answer the same (JSON, SSE and
errors), apart from the random ids and timestamps of each response."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from transformers import AutoTokenizer

from rollgate.core.app import make_app
from rollgate.gateway.model_routes import model_router
from rollgate.model_server.app import TRAINING_HEADER, create_model_app
from rollgate.model_server.scripted import ScriptedBackend
from rollgate.model_server.service import ModelService
from tests.model_server.conftest import CALC_TOOL

OK = {"model": "rollgate-tiny", "input": "what is 6*7?", "tools": [CALC_TOOL]}
# Per-response random ids and clock values, blanked before comparing.
_VOLATILE = re.compile(r'"(id|call_id|item_id|response_id|created_at|sequence_number)":\s*("[^"]*"|\d+)')


def blank(text: str) -> str:
    return _VOLATILE.sub(r'"\1": "<x>"', text)


async def conversation(c: httpx.AsyncClient) -> list[tuple[int, str, str]]:
    """Good and bad calls, JSON and SSE, with and without training mode."""
    calls: list[dict[str, Any]] = [
        {"json": OK},
        {"json": OK, "headers": {TRAINING_HEADER: "1"}},
        {"json": {**OK, "metadata": {"rollgate_training": "true"}}},
        {"json": {**OK, "stream": True}, "headers": {TRAINING_HEADER: "true"}},
        {"json": {**OK, "model": "gpt-nope"}},
        {"json": {**OK, "model": "gpt-nope", "stream": True}},
        {"json": {"model": "rollgate-tiny"}},
        {"json": {**OK, "input": [{"role": "robot", "content": "x"}]}},
        {"json": [1, 2]},
        {"content": b"{broken"},
        {"content": b""},
    ]
    out = []
    for call in calls:
        r = await c.post("/v1/responses", **call)
        out.append((r.status_code, r.headers["content-type"].split(";")[0], blank(r.text)))
    return out


@pytest.fixture
def service(tiny_model_dir) -> ModelService:
    return ModelService(ScriptedBackend(AutoTokenizer.from_pretrained(tiny_model_dir)))


def mounted_app(service: ModelService) -> FastAPI:
    app = make_app("gateway-like", component="model")
    app.include_router(model_router(service))
    return app


async def test_hot_route_answers_exactly_like_the_fastapi_route(service):
    standalone = create_model_app(service)
    assert re.escape("/v1/responses") in [r.pattern.pattern for r in standalone.state.hot_routes]
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=standalone), base_url="http://a") as a,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=mounted_app(service)), base_url="http://b") as b,
    ):
        hot = await conversation(a)
        routed = await conversation(b)
    assert hot == routed
    assert [(s, t) for s, t, _ in hot] == [
        (200, "application/json"),
        (200, "application/json"),
        (200, "application/json"),
        (200, "text/event-stream"),
        (404, "application/json"),
        (404, "application/json"),
        (400, "application/json"),
        (400, "application/json"),
        (400, "application/json"),
        (400, "application/json"),
        (400, "application/json"),
    ]
    plain, header_training, metadata_training = (json.loads(t) for _, _, t in hot[:3])
    assert plain["output"][0]["name"] == "calculator"
    assert "prompt_token_ids" not in plain["output"][0]
    assert header_training["output"][0]["generation_token_ids"]  # the header turned training on
    assert metadata_training["output"][0]["generation_token_ids"]
    assert "generation_log_probs" in hot[3][2]  # SSE in training mode carries the token fields
    assert json.loads(hot[4][2])["error"]["field"] == "model"
    assert json.loads(hot[7][2])["error"]["field"] == "input[0].role"
    assert json.loads(hot[9][2])["error"]["field"] == "body"


async def test_a_false_training_header_leaves_training_off(service):
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_model_app(service)), base_url="http://a"
    ) as c:
        r = await c.post("/v1/responses", json=OK, headers={TRAINING_HEADER: "0"})
    assert r.status_code == 200
    assert "generation_token_ids" not in r.json()["output"][0]


async def test_openapi_still_documents_the_responses_route(service):
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_model_app(service)), base_url="http://a"
    ) as c:
        spec = (await c.get("/openapi.json")).json()
    assert "post" in spec["paths"]["/v1/responses"]
    assert "get" in spec["paths"]["/v1/models"]
