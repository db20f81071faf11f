"""The baseline: a deliberately plain microservice stack in the style most rollout frameworks use,
so the overhead benchmark can state ratios measured on the same machine in the same run.

Written for this benchmark (no code from any other project). Its choices are the common ones:
- four FastAPI servers in separate processes (agent, resources, model proxy, inference backend),
- pydantic request and response models on every route (stdlib-json bodies),
- a fresh `httpx.AsyncClient` for every outgoing call (a new TCP connection each time); the
  clients share one TLS context, because building one per client (httpx loads the CA bundle)
  costs tens of milliseconds and would make the baseline far slower than real stacks of this kind,
- the model server is a proxy in front of an inference backend (an extra hop per model call).

One rollout costs about 8 HTTP hops: driver -> agent /run, agent -> resources /seed_session,
2 x (agent -> model proxy -> backend), agent -> resources /calculator, agent -> resources /verify.
The backend answers instantly with the same script as Rollgate's scripted backend (a calculator
call, then a final answer), so only framework cost is compared.

Run one role:  python -m benchmarks.baseline_naive_stack --role agent --port P --resources URL --model URL
"""

from __future__ import annotations

import argparse
import ast
import operator
import ssl
import uuid
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, HTTPException, Request, Response
from pydantic import BaseModel, Field

# Loopback is plain HTTP; the context only spares each fresh client from loading the CA bundle.
_TLS = ssl.create_default_context()


def fresh_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=60, verify=_TLS)


# --- wire types -------------------------------------------------------------------------------


class Item(BaseModel):
    type: str = "message"
    role: str | None = None
    content: Any = None
    name: str | None = None
    arguments: str | None = None
    call_id: str | None = None
    output: str | None = None


class ResponsesRequest(BaseModel):
    model: str = "naive"
    input: list[Item]
    tools: list[dict[str, Any]] = Field(default_factory=list)
    max_output_tokens: int | None = None


class ResponsesReply(BaseModel):
    id: str
    object: str = "response"
    model: str
    output: list[Item]
    status: str = "completed"


class SeedRequest(BaseModel):
    responses_create_params: dict[str, Any]
    expected_answer: str | None = None


class CalcRequest(BaseModel):
    expression: str


class CalcReply(BaseModel):
    output: str


class VerifyBody(BaseModel):
    response: str


class VerifyReply(BaseModel):
    reward: float


class RunRequest(BaseModel):
    responses_create_params: dict[str, Any]
    expected_answer: str | None = None


class RunReply(BaseModel):
    reward: float
    turns: int
    messages: list[Item]


def _health(app: FastAPI) -> None:
    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}


# --- inference backend: the scripted policy ----------------------------------------------------
def backend_app() -> FastAPI:
    app = FastAPI()
    _health(app)

    @app.post("/v1/responses", response_model=ResponsesReply)
    async def respond(req: ResponsesRequest) -> ResponsesReply:
        tool_outputs = [i for i in req.input if i.type == "function_call_output"]
        if not tool_outputs:
            out = [
                Item(
                    type="function_call",
                    name="calculator",
                    arguments='{"expression": "6*7"}',
                    call_id=f"call_{uuid.uuid4().hex[:8]}",
                )
            ]
        else:
            out = [Item(type="message", role="assistant", content=f"The answer is {tool_outputs[-1].output}.")]
        return ResponsesReply(id=f"resp_{uuid.uuid4().hex}", model=req.model, output=out)

    return app


# --- model server: a proxy in front of the backend ----------------------------------------------
def model_app(backend_url: str) -> FastAPI:
    app = FastAPI()
    _health(app)

    @app.post("/v1/responses", response_model=ResponsesReply)
    async def respond(req: ResponsesRequest) -> ResponsesReply:
        async with fresh_client() as client:
            r = await client.post(f"{backend_url}/v1/responses", json=req.model_dump())
        r.raise_for_status()
        return ResponsesReply.model_validate(r.json())

    return app


# --- resources server: calculator environment, sessions by header --------------------------------
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _calc(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _calc(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_calc(node.left), _calc(node.right))
    raise ValueError("unsupported expression")


def resources_app() -> FastAPI:
    app = FastAPI()
    _health(app)
    sessions: dict[str, dict[str, Any]] = {}

    def session(request: Request) -> dict[str, Any]:
        sid = request.headers.get("x-session-id", "")
        if sid not in sessions:
            raise HTTPException(404, "unknown session")
        return sessions[sid]

    @app.post("/seed_session")
    async def seed(req: SeedRequest, response: Response) -> dict[str, str]:
        sid = uuid.uuid4().hex
        sessions[sid] = {"expected": req.expected_answer, "calls": 0}
        response.headers["x-session-id"] = sid
        return {"session_id": sid}

    @app.post("/calculator", response_model=CalcReply)
    async def calculator(req: CalcRequest, request: Request) -> CalcReply:
        state = session(request)
        state["calls"] += 1
        value = _calc(ast.parse(req.expression, mode="eval"))
        return CalcReply(output=f"{value:g}")

    @app.post("/verify", response_model=VerifyReply)
    async def verify(req: VerifyBody, request: Request) -> VerifyReply:
        state = sessions.pop(request.headers.get("x-session-id", ""), None)
        if state is None:
            raise HTTPException(404, "unknown session")
        return VerifyReply(reward=1.0 if state["expected"] and state["expected"] in req.response else 0.0)

    return app


# --- agent server: the loop, a fresh client per call --------------------------------------------
def agent_app(resources_url: str, model_url: str, max_turns: int = 8) -> FastAPI:
    app = FastAPI()
    _health(app)

    async def post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
        async with fresh_client() as client:
            r = await client.post(url, json=body, headers=headers)
        r.raise_for_status()
        return r

    @app.post("/run", response_model=RunReply)
    async def run(req: RunRequest) -> RunReply:
        seeded = await post(f"{resources_url}/seed_session", req.model_dump())
        headers = {"x-session-id": seeded.headers["x-session-id"]}
        params = req.responses_create_params
        raw = params["input"]
        history = [Item(role="user", content=raw)] if isinstance(raw, str) else [Item.model_validate(i) for i in raw]
        final, turns = "", 0
        for turns in range(1, max_turns + 1):  # noqa: B007 - the count is read after the loop
            body = ResponsesRequest(input=history, tools=params.get("tools", []))
            reply = ResponsesReply.model_validate((await post(f"{model_url}/v1/responses", body.model_dump())).json())
            history.extend(reply.output)
            calls = [i for i in reply.output if i.type == "function_call"]
            if not calls:
                final = "".join(i.content for i in reply.output if isinstance(i.content, str))
                break
            for call in calls:
                args = CalcRequest.model_validate_json(call.arguments or "{}")
                out = CalcReply.model_validate(
                    (await post(f"{resources_url}/{call.name}", args.model_dump(), headers)).json()
                )
                history.append(Item(type="function_call_output", call_id=call.call_id, output=out.output))
        verdict = VerifyReply.model_validate(
            (await post(f"{resources_url}/verify", VerifyBody(response=final).model_dump(), headers)).json()
        )
        return RunReply(reward=verdict.reward, turns=turns, messages=history)

    return app


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--role", choices=["backend", "model", "resources", "agent"], required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--backend", help="backend URL (role model)")
    p.add_argument("--resources", help="resources URL (role agent)")
    p.add_argument("--model", help="model URL (role agent)")
    a = p.parse_args()
    app = {
        "backend": backend_app,
        "resources": resources_app,
        "model": lambda: model_app(a.backend),
        "agent": lambda: agent_app(a.resources, a.model),
    }[a.role]()
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning", access_log=False, backlog=4096)


if __name__ == "__main__":
    main()
