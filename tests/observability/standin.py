"""Trajectory records built with the real schemas, and a STAND-IN for the gateway's read API
(GET /v1/rollouts, /v1/rollouts/{job}/results as NDJSON lines in the envelope of
rollgate.gateway.stream: {cursor, type, record} then an `end` line) so the viewer's
rendering of every record shape (tool calls, error outcomes, failure records, hostile text, a
multi-role job's `episode` records with one trajectory per role) is
tested without having to make a real model produce each of them. The viewer is also tested
against the real gateway in test_metrics_e2e.py."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import Response

from rollgate.core import jsonutil
from rollgate.core.app import make_app
from rollgate.core.errors import NotFound
from rollgate.core.schemas import (
    EpisodeRecord,
    ErrorInfo,
    ErrorKind,
    FailureRecord,
    Outcome,
    PolicyRef,
    TaskRef,
    Timings,
    Trajectory,
    Turn,
)
from rollgate.gateway.ui import ui_router

JOB = "job_viewer_1"
OTHER_JOB = "job_viewer_2"
ROLES_JOB = "job_viewer_roles"
HOSTILE = "<img src=x onerror=\"document.title='pwned'\">"


def _task(env: str, task_id: str) -> TaskRef:
    return TaskRef(
        env=env, task_id=task_id, seed=7, row={"responses_create_params": {"input": f"task {task_id}"}, "env": env}
    )


def _turn(prompt: int, gen: int) -> Turn:
    return Turn(
        prompt_token_ids=list(range(prompt)),
        generation_token_ids=list(range(gen)),
        generation_log_probs=[-0.5] * gen,
        finish_reason="stop",
        weight_version="w3",
    )


def records() -> list[dict]:
    policy = PolicyRef(model="rollgate-tiny", policy_version="v3")
    solved = Trajectory(
        trajectory_id="traj_solved",
        group_id="grp_a",
        sample_index=0,
        job_id=JOB,
        task=_task("workplace", "wp-1"),
        policy=policy,
        outcome=Outcome.completed,
        reward=1.0,
        reward_components={"state": 0.75, "format": 0.25},
        messages=[
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Book room 4 at noon."}]},
            {
                "type": "function_call",
                "name": "book_room",
                "call_id": "call_1",
                "arguments": '{"room": 4, "time": "12:00"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "booked room 4 at 12:00"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done: room 4."}]},
        ],
        turns=[_turn(31, 12), _turn(58, 5)],
        timings=Timings(total_s=1.25, model_s=0.75, tools_s=0.25, verify_s=0.125),
        metrics={"turns": 2, "tool_calls": 1},
    )
    partial = Trajectory(
        trajectory_id="traj_partial",
        group_id="grp_b",
        sample_index=1,
        job_id=JOB,
        task=_task("math", "m-2"),
        policy=policy,
        outcome=Outcome.truncated,
        reward=0.25,
        turns=[_turn(20, 64)],
        messages=[
            {"type": "message", "role": "user", "content": "What is 6*7?"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": HOSTILE}]},
        ],
        timings=Timings(total_s=0.5),
    )
    broken = Trajectory(
        trajectory_id="traj_broken",
        group_id="grp_c",
        job_id=JOB,
        task=_task("math", "m-3"),
        policy=policy,
        outcome=Outcome.model_error,
        error=ErrorInfo(kind=ErrorKind.upstream, component="model", message="model server answered 502"),
        messages=[{"type": "message", "role": "user", "content": "What is 1+1?"}],
        timings=Timings(total_s=0.125),
    )
    bad_row = FailureRecord(
        job_id=JOB,
        task_id="row-9",
        line=9,
        error=ErrorInfo(
            kind=ErrorKind.bad_request,
            component="gateway",
            field="responses_create_params.input",
            message="responses_create_params.input is required",
        ),
    )
    return [r.model_dump(mode="json") for r in (solved, partial, broken, bad_row)]


def _move(role: str, cell: int, *, episode: str, answer: str) -> list[dict]:
    return [
        {"type": "message", "role": "user", "content": f"[{role}] your move"},
        {
            "type": "function_call",
            "name": "act",
            "call_id": f"{episode}-{role}",
            "arguments": f'{{"action": "[{cell}]"}}',
        },
        {"type": "function_call_output", "call_id": f"{episode}-{role}", "output": answer},
    ]


def role_trajectory(role: str, episode: str, **fields) -> Trajectory:
    return Trajectory(
        trajectory_id=f"traj_{episode}_{role}",
        group_id="grp_ttt",
        job_id=ROLES_JOB,
        task=_task("textarena/TicTacToe", "ttt-1"),
        role=role,
        episode_id=episode,
        **fields,
    )


def episode_records() -> list[dict]:
    """Two TicTacToe episodes of two policies: one won by player_0, one whose player_1 model failed."""
    mine = PolicyRef(model="rollgate-tiny", policy_version="a", sampling={"temperature": 1.0})
    theirs = PolicyRef(model="opponent", policy_version="b", sampling={"temperature": 0.3})
    won = [
        role_trajectory(
            "player_0",
            "ep_won",
            policy=mine,
            outcome=Outcome.completed,
            reward=1.0,
            turns=[_turn(40, 6), _turn(70, 6), _turn(100, 6)],
            messages=_move("player_0", 4, episode="ep_won", answer="X at 4"),
        ),
        role_trajectory(
            "player_1",
            "ep_won",
            policy=theirs,
            outcome=Outcome.completed,
            reward=-1.0,
            turns=[_turn(42, 7), _turn(73, 7)],
            messages=_move("player_1", 0, episode="ep_won", answer="O at 0"),
        ),
    ]
    error = ErrorInfo(kind=ErrorKind.upstream, component="model", message="role player_1: model server answered 502")
    failed = [
        role_trajectory(
            role, "ep_failed", sample_index=1, policy=policy, outcome=Outcome.model_error, error=error, turns=turns
        )
        for role, policy, turns in (("player_0", mine, [_turn(40, 6)]), ("player_1", theirs, []))
    ]
    episodes = [
        EpisodeRecord(
            episode_id="ep_won", group_id="grp_ttt", job_id=ROLES_JOB, outcome=Outcome.completed, trajectories=won
        ),
        EpisodeRecord(
            episode_id="ep_failed",
            group_id="grp_ttt",
            job_id=ROLES_JOB,
            sample_index=1,
            outcome=Outcome.model_error,
            trajectories=failed,
        ),
    ]
    return [e.model_dump(mode="json") for e in episodes]


def _kind(record: dict) -> str:
    return "episode" if "trajectories" in record else "trajectory" if "trajectory_id" in record else "failure"


def standin_gateway(api_key: str | None = None) -> FastAPI:
    """The viewer router plus a stand-in of the gateway's job API, behind the gateway's real auth."""
    app = make_app("stand-in gateway", component="gateway")
    if api_key:
        from rollgate.core.auth import require_bearer

        require_bearer(app, api_key, component="gateway")
    app.include_router(ui_router())
    data = {JOB: records(), OTHER_JOB: [], ROLES_JOB: episode_records()}

    @app.get("/v1/rollouts")
    async def jobs():
        return {"jobs": [{"job_id": j, "state": "done", "done": len(r), "total": len(r)} for j, r in data.items()]}

    @app.get("/v1/rollouts/{job}/results")
    async def results(job: str):
        if job not in data:
            raise NotFound(f"no job {job}", component="gateway", field="job_id")
        lines = [{"cursor": f"{job}:{i + 1}", "type": _kind(r), "record": r} for i, r in enumerate(data[job])]
        lines.append({"cursor": f"{job}:{len(lines)}", "type": "end", "progress": {"job_id": job}})
        body = b"".join(jsonutil.dumps(line) + b"\n" for line in lines)
        return Response(body, media_type="application/x-ndjson")

    return app
