"""A stand-in for a NeMo Gym 0.7 resources server, for the default test tier: real NeMo Gym needs
Python 3.13 and ~40 s to start, so the fast tests talk to this small FastAPI app over loopback
instead, and tests/interop/test_nemo_gym_real.py (marker `nemo_gym`) runs the real servers.

It imitates what the adapter relies on, as NeMo Gym 0.7 does it: the protocol routes
(/seed_session, /verify, /close_session, /aggregate_metrics, GET /reverify_mode), tool routes
whose pydantic bodies appear in /openapi.json as `$ref`s, the session cookie named
`<ServerClass>___<server name>` set on every answer, a /verify that validates the `response` as a
Responses-API object (the `openai` package's model, which NeMo Gym's extends) and echoes the
request with `reward`, and errors as NeMo Gym servers give them: 422 for bad arguments, 404 for
a missing route, 500 with the exception's repr. Plus misbehaving tools for the failure tests.

    python nemo_gym_standin.py PORT [fixed|catchall]
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections import Counter
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from openai.types.responses import Response as ResponsesObject
from pydantic import BaseModel, ValidationError

COOKIE = "StandInCounterServer___standin"


class AddRequest(BaseModel):
    amount: int


class Total(BaseModel):
    total: int


class SleepRequest(BaseModel):
    seconds: float = 5.0


def build(mode: str) -> FastAPI:
    app = FastAPI()
    totals: dict[str, int] = {}
    calls: Counter[str] = Counter()

    @app.middleware("http")
    async def session(request: Request, call_next):
        calls[request.url.path] += 1
        sid = request.cookies.get(COOKIE) or uuid.uuid4().hex
        request.state.sid = sid
        try:
            response = await call_next(request)
        except Exception as exc:  # NeMo Gym's exception middleware: 500 with the repr
            response = JSONResponse(content=repr(exc), status_code=500)
        response.set_cookie(COOKIE, sid, httponly=True, samesite="lax")
        return response

    @app.post("/seed_session")
    async def seed_session(request: Request) -> dict[str, Any]:
        body = await request.json()
        if "start" in body and not isinstance(body["start"], int):
            return JSONResponse({"detail": [{"loc": ["body", "start"], "msg": "not an int"}]}, status_code=422)
        totals[request.state.sid] = int(body.get("start", 0))
        return {}

    @app.post("/verify")
    async def verify(request: Request) -> Any:
        body = await request.json()
        if "responses_create_params" not in body or "response" not in body:
            return JSONResponse({"detail": "responses_create_params and response are required"}, status_code=422)
        # NeMo Gym's response model is openai's with tool results (function_call_output) allowed
        # among the output items, which the episode's transcript holds: check the rest.
        checked = dict(body["response"])
        checked["output"] = [i for i in checked.get("output", []) if i.get("type") != "function_call_output"]
        try:
            response = ResponsesObject.model_validate(checked)
        except ValidationError as exc:
            return JSONResponse({"detail": exc.errors(include_url=False, include_context=False)}, status_code=422)
        total = totals.get(request.state.sid)
        said = "".join(part.text for item in response.output if item.type == "message" for part in item.content).strip()
        state = float(total == body.get("expected_total"))
        answer = 0.5 if said == str(body.get("expected_total")) else 0.0
        out = {**body, "reward": state + answer, "reward_components": {"state": state, "answer": answer}}
        out.update(mask_sample=bool(body.get("mask")), failure_kind=None, failure_reason=None, total_seen=total)
        if body.get("verify_garbage"):
            return Response(b"{not json", media_type="application/json")
        return out

    @app.post("/close_session")
    async def close_session(request: Request) -> dict[str, Any]:
        return {"resources_session_id": "x"}

    @app.post("/aggregate_metrics")
    async def aggregate_metrics() -> dict[str, Any]:
        return {}

    @app.get("/reverify_mode")
    async def reverify_mode() -> str:
        return "unknown"

    @app.get("/_calls")
    async def seen() -> dict[str, int]:
        """How often each path was called: the tests' view of what reached the server."""
        return dict(calls)

    if mode == "catchall":

        @app.post("/{tool_name}")
        async def any_tool(tool_name: str, request: Request) -> Any:
            body = await request.json() if await request.body() else {}
            if tool_name == "add":
                totals[request.state.sid] = totals.get(request.state.sid, 0) + int(body["amount"])
                return {"total": totals[request.state.sid]}
            return JSONResponse({"detail": f"no tool {tool_name}"}, status_code=404)

        return app

    @app.post("/add")
    async def add(body: AddRequest, request: Request) -> Total:
        """Add an amount to the session's total."""
        totals[request.state.sid] = totals.get(request.state.sid, 0) + body.amount
        return Total(total=totals[request.state.sid])

    @app.post("/read_total")
    async def read_total(request: Request) -> Total:
        return Total(total=totals.get(request.state.sid, 0))

    @app.post("/refuse")
    async def refuse() -> str:
        return "error: the counter refuses"  # a tool error as some servers give it: 200 and text

    @app.post("/boom")
    async def boom() -> Any:
        raise RuntimeError("the tool crashed")

    @app.post("/garbage")
    async def garbage() -> Response:
        return Response(b"<html>oops", media_type="application/json")

    @app.post("/slow")
    async def slow(body: SleepRequest) -> Total:
        await asyncio.sleep(body.seconds)
        return Total(total=0)

    @app.post("/quit")
    async def quit_() -> Total:
        os._exit(0)  # the server dies mid-episode

    return app


if __name__ == "__main__":
    port = int(sys.argv[1])
    mode = sys.argv[2] if len(sys.argv) > 2 else "fixed"
    uvicorn.run(build(mode), host="127.0.0.1", port=port, log_level="warning")
