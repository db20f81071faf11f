"""The agent's HTTP face: `POST /run` {task row} -> Trajectory (or NeMo Gym's /run response).
The agent role's app, with its queue worker, is built by rollgate.stack.agent_role."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict

from rollgate.agent_server.agent import Agent, RunContext
from rollgate.agent_server.nemo_gym import to_nemo_gym_run_response
from rollgate.agent_server.plugins import AgentSet
from rollgate.core.app import read_json
from rollgate.core.openapi import inline_schema, json_body, json_content, semantic_checks
from rollgate.core.rows import parse_row
from rollgate.core.schemas import TaskRow, Trajectory


def run_router(runner: Agent | AgentSet) -> APIRouter:
    """`runner`: one agent, or a stack's AgentSet (which runs its default agent, the shipped loop)."""
    r = APIRouter(tags=["agent"])

    envs = sorted(runner.envs)

    @r.post(
        "/run",
        summary="Run one episode of a task row; returns its Trajectory "
        "(or, with format=nemo_gym, NeMo Gym's /run response with token fields)",
        **run_docs(envs),
    )
    async def run(
        request: Request,
        env: str | None = Query(
            None, description="environment of a row that names none", json_schema_extra={"enum": envs}
        ),
        policy_version: str | None = Query(None),
        format: Literal["trajectory", "nemo_gym"] = Query("trajectory"),
    ) -> dict[str, Any]:
        raw = await read_json(request, component="agent")
        # a row that names no environment runs in `env`, else in the only one this agent serves
        default = env or (envs[0] if len(envs) == 1 else None)
        task = parse_row(raw, env=default, known_envs=runner.envs, component="agent")
        traj = await runner.run(task, RunContext(policy_version=policy_version))
        if format == "nemo_gym":
            return to_nemo_gym_run_response(traj)
        return traj.model_dump(mode="json")

    return r


class NemoGymRun(BaseModel):
    """NeMo Gym's /run response (rollgate.agent_server.nemo_gym)."""

    model_config = ConfigDict(extra="allow")
    responses_create_params: dict[str, Any]
    response: dict[str, Any]
    reward: float | None
    rollgate: dict[str, Any]


def run_docs(envs: list[str]) -> dict[str, Any]:
    """The body is read by hand (parse_row, the edge): its schema is TaskRow's, its `env` one of
    this agent's (or the `env` query parameter's)."""
    row = inline_schema(TaskRow)
    row["properties"]["env"] = {"enum": [*envs, None], "description": "else the `env` query parameter"}
    if len(envs) == 1:
        row["properties"]["env"]["description"] += ", else the only one served"
    ok = json_content({"anyOf": [inline_schema(Trajectory, mode="serialization"), inline_schema(NemoGymRun)]}, "")
    ok["description"] = "The episode's Trajectory (format=trajectory) or NeMo Gym's /run response (format=nemo_gym)"
    checks = semantic_checks(
        ("env", "a row that names no environment needs the `env` query parameter (unless one is served)"),
        ("agent", "one of GET /v1/agents"),
    )
    return {"response_model": None, "responses": {200: ok}, "openapi_extra": {**json_body(row), **checks}}
