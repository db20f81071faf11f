"""The agent's HTTP face: `POST /run` {task row} -> Trajectory (or NeMo Gym's /run response).
The agent role's app, with its queue worker, is built by rollgate.stack.agent_role."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, Request

from rollgate.agent_server.agent import Agent, RunContext
from rollgate.agent_server.nemo_gym import to_nemo_gym_run_response
from rollgate.core.app import read_json
from rollgate.core.rows import parse_row


def run_router(agent: Agent) -> APIRouter:
    r = APIRouter(tags=["agent"])

    @r.post(
        "/run",
        summary="Run one episode of a task row; returns its Trajectory "
        "(or, with format=nemo_gym, NeMo Gym's /run response with token fields)",
    )
    async def run(
        request: Request,
        env: str | None = Query(None, description="environment, else row.env"),
        policy_version: str | None = Query(None),
        format: Literal["trajectory", "nemo_gym"] = Query("trajectory"),
    ) -> dict[str, Any]:
        raw = await read_json(request, component="agent")
        task = parse_row(raw, env=env, known_envs=agent.envs, component="agent")
        traj = await agent.run(task, RunContext(policy_version=policy_version))
        if format == "nemo_gym":
            return to_nemo_gym_run_response(traj)
        return traj.model_dump(mode="json")

    return r
