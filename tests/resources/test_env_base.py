"""The environment base: tools declared once give schema, route and validation."""

from __future__ import annotations

import httpx
import pytest

from rollgate.core.errors import BadRequest, NotFound
from rollgate.core.schemas import VerifyRequest
from rollgate.core.session_store import MemorySessionStore
from rollgate.resources_servers.app import create_resources_app
from rollgate.resources_servers.base import EnvRuntime
from tests.resources.toy_env import CounterEnv

ROW = {"responses_create_params": {"input": "count"}, "target": 7}


def test_schema_is_derived_from_the_signature():
    schemas = {s["name"]: s for s in CounterEnv.tool_schemas()}
    assert set(schemas) == {"add", "reset", "slow_read"}
    add = schemas["add"]
    assert add["type"] == "function"
    assert add["description"] == "Add an amount (1..5) to the counter."
    props = add["parameters"]["properties"]
    assert props["amount"] == {"type": "integer", "minimum": 1, "maximum": 5, "description": "how much to add"}
    assert add["parameters"]["required"] == ["amount"]
    assert schemas["reset"]["parameters"]["properties"]["mode"]["enum"] == ["zero", "target"]


async def test_tool_calls_change_state_and_verify_reads_it():
    rt = EnvRuntime(CounterEnv(), MemorySessionStore())
    seeded = await rt.seed(ROW)
    assert seeded.observation == "reach 7"
    assert (await rt.call_tool(seeded.session_id, "add", {"amount": 5})).output == "value=5"
    assert (await rt.call_tool(seeded.session_id, "add", '{"amount": 2}')).output == "value=7"
    assert (await rt.call_tool(seeded.session_id, "slow_read", {})).output == "7"
    result = await rt.verify(seeded.session_id, VerifyRequest(response="7"))
    assert result.reward == 1.5 and result.reward_components == {"state": 1.0, "answer": 0.5}


async def test_bad_arguments_are_error_outputs_for_the_model():
    rt = EnvRuntime(CounterEnv(), MemorySessionStore())
    sid = (await rt.seed(ROW)).session_id
    cases = [
        ({"amount": "lots"}, "amount"),
        ({"amount": 9}, "amount"),
        ({}, "amount"),
        ({"amount": 1, "bogus": 1}, "bogus"),
        ("{not json", "not valid JSON"),
    ]
    for args, needle in cases:
        out = await rt.call_tool(sid, "add", args)
        assert out.is_error and needle in out.output, (args, out)
    illegal = [await rt.call_tool(sid, "add", {"amount": 5}) for _ in range(5)]
    assert illegal[-1].is_error and "cannot pass 20" in illegal[-1].output
    assert (await rt.state(sid))["value"] == 20


async def test_unknown_tool_session_and_malformed_rows_are_typed_errors():
    rt = EnvRuntime(CounterEnv(), MemorySessionStore())
    sid = (await rt.seed(ROW)).session_id
    with pytest.raises(NotFound, match="unknown tool"):
        await rt.call_tool(sid, "explode", {})
    with pytest.raises(NotFound):
        await rt.call_tool("nope", "add", {"amount": 1})
    with pytest.raises(BadRequest) as exc:
        await rt.seed({"responses_create_params": {}})
    assert "input" in str(exc.value)
    with pytest.raises(BadRequest) as exc:
        await rt.seed({"task_id": "x"})
    assert exc.value.field == "responses_create_params"


async def test_http_routes_follow_the_contract():
    app = create_resources_app(EnvRuntime(CounterEnv(), MemorySessionStore()), max_body_bytes=10_000)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://env") as c:
        tools = (await c.get("/tools")).json()
        assert [t["name"] for t in tools] == ["add", "reset", "slow_read"]
        r = await c.post("/sessions", json=ROW)
        sid = r.json()["session_id"]
        r = await c.post(f"/sessions/{sid}/tools/add", json={"arguments": {"amount": 3}})
        assert r.status_code == 200 and r.json() == {"output": "value=3", "is_error": False}
        r = await c.post(f"/sessions/{sid}/tools/add", json={"arguments": {"amount": "x"}})
        assert r.status_code == 200 and r.json()["is_error"]
        r = await c.post(f"/sessions/{sid}/tools/nope", json={"arguments": {}})
        assert r.status_code == 404 and r.json()["error"]["field"] == "tool"
        r = await c.post("/sessions/not-a-session/tools/add", json={"arguments": {"amount": 1}})
        assert r.status_code == 404
        r = await c.post("/sessions", content=b"{broken")
        assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
        r = await c.post("/sessions", json={"responses_create_params": {"input": 5}})
        assert r.status_code == 400 and r.json()["error"]["field"] == "responses_create_params"
        r = await c.post("/sessions", content=b"x" * 20_000, headers={"content-type": "application/json"})
        assert r.status_code == 413
        r = await c.post(f"/sessions/{sid}/verify", json={"response": "7"})
        assert r.json()["reward_components"] == {"state": 0.0, "answer": 0.5}
        assert (await c.delete(f"/sessions/{sid}")).status_code == 204
        assert (await c.post(f"/sessions/{sid}/verify", json={})).status_code == 404
        spec = (await c.get("/openapi.json")).json()
        assert "/sessions/{session_id}/tools/{tool_name}" in spec["paths"]
        assert (await c.get("/healthz")).status_code == 200


async def test_nemo_gym_compatibility_routes():
    app = create_resources_app(EnvRuntime(CounterEnv(), MemorySessionStore()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://env") as c:
        r = await c.post("/seed_session", json={"target": 3})
        assert r.status_code == 200 and "rollgate_session" in r.cookies
        r = await c.post("/add", json={"amount": 3})  # cookie carries the session
        assert r.json()["output"] == "value=3"
        body = {
            "responses_create_params": {"input": "x"},
            "response": {
                "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "3"}]}]
            },
        }
        r = await c.post("/verify", json=body)
        assert r.json()["reward"] == 1.5 and r.json()["responses_create_params"] == {"input": "x"}
    async with httpx.AsyncClient(transport=transport, base_url="http://env") as fresh:
        r = await fresh.post("/add", json={"amount": 1})
        assert r.status_code == 400 and r.json()["error"]["field"] == "session_id"
