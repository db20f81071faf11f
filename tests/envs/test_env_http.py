"""Each shipped environment over its HTTP face: GET /tools lists its tools with JSON schemas, and
one gold episode runs through the native routes with typed errors for bad input."""

from __future__ import annotations

import httpx
import jsonschema
import pytest

from rollgate.resources_servers.app import create_resources_app
from tests.envs.gold import example_rows, runtime

TOOLS = {
    "math": {"calculator"},
    "workplace": {"lookup_contact", "search_emails", "read_email", "send_email", "create_event", "list_events"},
    "game2048": {"view_board", "move"},
    "wordle": {"guess"},
}


def _client(env: str) -> httpx.AsyncClient:
    app = create_resources_app(runtime(env))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://env")


@pytest.mark.parametrize("env", sorted(TOOLS))
async def test_tools_route_lists_every_tool_with_a_json_schema(env):
    async with _client(env) as c:
        r = await c.get("/tools")
    assert r.status_code == 200
    tools = r.json()
    assert {t["name"] for t in tools} == TOOLS[env]
    for t in tools:
        assert t["type"] == "function" and t["description"]
        params = t["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        jsonschema.Draft202012Validator.check_schema(params)
    if env == "game2048":
        move = next(t for t in tools if t["name"] == "move")
        assert move["parameters"]["properties"]["direction"]["enum"] == ["up", "down", "left", "right"]


@pytest.mark.parametrize("env", sorted(TOOLS))
async def test_gold_episode_over_http(env):
    row = example_rows(env)[1]
    async with _client(env) as c:
        r = await c.post("/sessions", json=row)
        assert r.status_code == 200, r.text
        sid = r.json()["session_id"]
        for call in row["gold"]["calls"]:
            r = await c.post(f"/sessions/{sid}/tools/{call['name']}", json={"arguments": call["arguments"]})
            assert r.status_code == 200 and not r.json()["is_error"], r.text
        r = await c.post(f"/sessions/{sid}/verify", json={"response": row["gold"]["response"]})
        assert r.status_code == 200 and r.json()["reward"] > 0.5, r.text
        assert (await c.delete(f"/sessions/{sid}")).status_code == 204
        r = await c.post(f"/sessions/{sid}/verify", json={"response": "x"})
        assert r.status_code == 404 and r.json()["error"]["kind"] == "not_found"


async def test_bad_input_over_http_gets_typed_errors_never_500():
    async with _client("wordle") as c:
        r = await c.post("/sessions", json={"responses_create_params": {"input": "x"}, "secret": "qqqqq"})
        assert r.status_code == 400 and r.json()["error"]["field"] == "row"
        r = await c.post("/sessions", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 400
        r = await c.post("/sessions", json={"secret": "apple"})
        assert r.status_code == 400 and r.json()["error"]["field"] == "responses_create_params"
        sid = (await c.post("/sessions", json={"responses_create_params": {"input": "x"}, "secret": "apple"})).json()[
            "session_id"
        ]
        r = await c.post(f"/sessions/{sid}/tools/guess", json={"arguments": {"word": "four"}})
        assert r.status_code == 200 and r.json()["is_error"]
        r = await c.post(f"/sessions/{sid}/tools/shout", json={"arguments": {}})
        assert r.status_code == 404 and r.json()["error"]["field"] == "tool"
        r = await c.post("/sessions/not-a-session/tools/guess", json={"arguments": {"word": "apple"}})
        assert r.status_code == 404


async def test_math_answers_nemo_gym_stateless_verify():
    """A NeMo Gym agent posts the row's fields plus its Responses output to /verify."""
    response = {
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "7 * 6 = 42\nAnswer: 42"}],
            }
        ]
    }
    body = {"responses_create_params": {"input": "What is 7 * 6?"}, "expected_answer": "42"}
    async with _client("math") as c:
        right = await c.post("/verify", json={**body, "response": response})
        wrong = await c.post("/verify", json={**body, "expected_answer": "41", "response": response})
    assert right.status_code == 200 and right.json()["reward"] == 1.0
    assert wrong.status_code == 200 and wrong.json()["reward"] == 0.0
