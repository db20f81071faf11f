"""A job's rows are checked at submit: a Responses field the model server would refuse, or JSON
nested past the limit, is a 400 naming the row and the field, never a job that crashes its
agent (or a 500) later. Real HTTP on loopback; the in-memory queue (nothing is queued)."""

from __future__ import annotations

import httpx
import pytest

from rollgate.jobs.memory import MemoryJobQueue
from tests.gateway.serving import gateway_client

MAX_DEPTH = 64  # rollgate.core.jsonutil.MAX_DEPTH
ROW = {"responses_create_params": {"input": "What is 6*7?"}, "expected_answer": "42"}


def params(**kw) -> dict:
    return {**ROW, "responses_create_params": {**ROW["responses_create_params"], **kw}}


async def submit(client: httpx.AsyncClient, *rows: dict) -> httpx.Response:
    return await client.post("/v1/rollouts", json={"tasks": [ROW, *rows], "env": "math"})


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (params(input=[5]), "tasks[1].responses_create_params.input[0]"),
        (params(tools="x"), "tasks[1].responses_create_params.tools"),
        (params(tools=[{"type": "function"}]), "tasks[1].responses_create_params.tools[0].name"),
        (params(input=[{"role": "robot", "content": "hi"}]), "tasks[1].responses_create_params.input[0].role"),
        (params(input=[{"role": "user", "content": 7}]), "tasks[1].responses_create_params.input[0].content"),
        (params(input=[{"type": "image"}]), "tasks[1].responses_create_params.input[0].type"),
        (params(temperature="hot"), "tasks[1].responses_create_params.temperature"),
        (params(max_output_tokens=10**11), "tasks[1].responses_create_params.max_output_tokens"),
        (params(tool_choice=3), "tasks[1].responses_create_params.tool_choice"),
    ],
)
async def test_a_bad_responses_field_in_a_row_is_a_400_at_submit(bad, field):
    queue = MemoryJobQueue()
    async with gateway_client(queue) as client:
        resp = await submit(client, bad)
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["field"] == field
        assert await queue.queued() == 0  # nothing of the job was queued


async def test_good_rows_with_items_and_tools_are_accepted():
    tool = {"type": "function", "name": "calculator", "parameters": {"type": "object", "properties": {}}}
    items = [
        {"role": "system", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "6*7?"}]},
        {"type": "function_call", "name": "calculator", "arguments": "{}", "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
    ]
    async with gateway_client(MemoryJobQueue()) as client:
        resp = await submit(client, params(input=items, tools=[tool], tool_choice="auto", temperature=0.5))
        assert resp.status_code == 201, resp.text


def nested(depth: int):
    value: list | str = "x"
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 300])
async def test_a_row_nested_too_deep_is_a_400_naming_the_field(depth):
    async with gateway_client(MemoryJobQueue()) as client:
        resp = await submit(client, {**ROW, "deep": nested(depth)})
        assert resp.status_code == 400, resp.text
        error = resp.json()["error"]
        assert error["field"].startswith("tasks[1].deep") and f"deeper than {MAX_DEPTH}" in error["message"]
        # as deep as allowed: accepted (the body itself adds three levels: body, tasks, the row)
        assert (await submit(client, {**ROW, "deep": nested(MAX_DEPTH - 3)})).status_code == 201
