"""Rollout jobs: the request a trainer sends, its validation, and the routes.

POST /v1/rollouts            {tasks, env?, agent?, repeats, sampling, policy_version?} -> {job_id, num_tasks}
GET  /v1/rollouts            recent jobs with their progress (the viewer's job list)
GET  /v1/rollouts/{job}      progress: state, done/total, counts by outcome, mean reward
GET  /v1/rollouts/{job}/results?cursor=C&wait=true   NDJSON records (see rollgate.gateway.stream)
DELETE /v1/rollouts/{job}    cancel: every unfinished task gets one `cancelled` record
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rollgate.agent_server.items import stable_task_id
from rollgate.core import jsonutil
from rollgate.core.app import read_json
from rollgate.core.errors import BadRequest
from rollgate.core.metrics import Metrics
from rollgate.core.schemas import TaskRow
from rollgate.gateway.queue import JobProgress, JobQueue, JobSpec, TaskEnvelope
from rollgate.gateway.stream import results_response

COMPONENT = "gateway"
AGENTS = ("default",)  # agent loops a job may ask for


class SamplingParams(BaseModel):
    """Per-job overrides of the rows' sampling parameters."""

    model_config = ConfigDict(extra="forbid")
    temperature: float | None = Field(None, ge=0, le=10)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = None
    max_output_tokens: int | None = Field(None, ge=1, le=1_000_000)


class RolloutRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tasks: list[Any] = Field(description="task rows (NeMo Gym format accepted unchanged)")
    env: str | None = Field(None, description="environment of rows that name none")
    agent: str | None = Field(None, description="agent loop (default: 'default')")
    repeats: int = Field(1, ge=1, le=1024, description="samples per task (one group per task)")
    sampling: SamplingParams = Field(default_factory=SamplingParams)
    policy_version: str | None = Field(None, max_length=256, description="recorded on every trajectory")


class SubmitResponse(BaseModel):
    job_id: str
    num_tasks: int
    num_rows: int
    repeats: int


def _row_error(index: int, exc: ValidationError) -> BadRequest:
    e = exc.errors()[0]
    loc = ".".join(str(x) for x in e.get("loc", ()))
    field = f"tasks[{index}]" + (f".{loc}" if loc else "")
    return BadRequest(f"{field}: {e.get('msg')}", component=COMPONENT, field=field)


def plan_job(
    req: RolloutRequest, *, known_envs: list[str], model_name: str, max_task_bytes: int = 1_000_000
) -> tuple[JobSpec, list[TaskEnvelope]]:
    """Validate every row (the first bad one is a 400 naming its index and field) and expand
    the job into tasks: rows x repeats, the repeats of a row sharing one group."""
    if not req.tasks:
        raise BadRequest("tasks: at least one task row is required", component=COMPONENT, field="tasks")
    agent = req.agent or "default"
    if agent not in AGENTS:
        raise BadRequest(
            f"agent: unknown agent loop {agent!r}; known: {', '.join(AGENTS)}", component=COMPONENT, field="agent"
        )
    if req.env is not None and req.env not in known_envs:
        raise BadRequest(
            f"env: unknown environment {req.env!r}; this gateway serves: {', '.join(sorted(known_envs)) or 'none'}",
            component=COMPONENT,
            field="env",
        )
    job_id = f"job_{uuid.uuid4().hex}"
    sampling = req.sampling.model_dump(exclude_none=True)
    tasks: list[TaskEnvelope] = []
    for i, raw in enumerate(req.tasks):
        if not isinstance(raw, dict):
            raise BadRequest(f"tasks[{i}]: a task row must be a JSON object", component=COMPONENT, field=f"tasks[{i}]")
        size = len(jsonutil.dumps(raw))
        if size > max_task_bytes:
            raise BadRequest(
                f"tasks[{i}]: row is {size} bytes, over the limit of {max_task_bytes} (gateway.max_task_bytes)",
                component=COMPONENT,
                field=f"tasks[{i}]",
            )
        try:
            row = TaskRow.model_validate(raw)
        except ValidationError as exc:
            raise _row_error(i, exc) from None
        env = row.env or req.env
        if env is None:
            raise BadRequest(
                f"tasks[{i}].env: the row names no environment and the job sets no `env`",
                component=COMPONENT,
                field=f"tasks[{i}].env",
            )
        if env not in known_envs:
            raise BadRequest(
                f"tasks[{i}].env: unknown environment {env!r}; this gateway serves: "
                f"{', '.join(sorted(known_envs)) or 'none'}",
                component=COMPONENT,
                field=f"tasks[{i}].env",
            )
        task_id = row.task_id or stable_task_id(row.row())
        group_id = f"grp_{job_id[4:16]}_{i}"
        for s in range(req.repeats):
            tasks.append(
                TaskEnvelope(
                    job_id=job_id,
                    key=f"{i}.{s}",
                    index=i,
                    sample_index=s,
                    group_id=group_id,
                    task_id=task_id,
                    row=raw,
                    env=env,
                    agent=agent,
                    sampling=sampling,
                    policy_version=req.policy_version,
                )
            )
    spec = JobSpec(
        job_id=job_id,
        created_at=time.time(),
        num_tasks=len(tasks),
        num_rows=len(req.tasks),
        repeats=req.repeats,
        env=req.env,
        agent=agent,
        policy_version=req.policy_version,
        sampling=sampling,
        model=model_name,
    )
    return spec, tasks


def jobs_router(
    queue: JobQueue,
    *,
    known_envs: Callable[[], list[str]],
    model_name: str,
    max_task_bytes: int,
    metrics: Metrics | None = None,
) -> APIRouter:
    r = APIRouter(prefix="/v1", tags=["rollouts"])

    @r.get("/envs", summary="Environments this gateway can run jobs on")
    async def list_envs() -> dict[str, list[str]]:
        return {"envs": sorted(known_envs())}

    @r.post("/rollouts", response_model=SubmitResponse, status_code=201, summary="Submit a rollout job")
    async def submit(request: Request) -> SubmitResponse:
        body = await read_json(request, component=COMPONENT)
        if not isinstance(body, dict):
            raise BadRequest('body must be a JSON object {"tasks": [...]}', component=COMPONENT, field="body")
        try:
            req = RolloutRequest.model_validate(body)
        except ValidationError as exc:
            e = exc.errors()[0]
            field = ".".join(str(x) for x in e.get("loc", ())) or "body"
            raise BadRequest(f"{field}: {e.get('msg')}", component=COMPONENT, field=field) from None
        spec, tasks = plan_job(req, known_envs=known_envs(), model_name=model_name, max_task_bytes=max_task_bytes)
        await queue.submit(spec, tasks)
        if metrics:
            metrics.jobs.labels("submitted").inc()
            metrics.queue_depth.set(await queue.queued())
        return SubmitResponse(
            job_id=spec.job_id, num_tasks=spec.num_tasks, num_rows=spec.num_rows, repeats=spec.repeats
        )

    @r.get("/rollouts", summary="Recent jobs, newest first")
    async def list_jobs(limit: int = Query(100, ge=1, le=1000)) -> dict[str, list[JobProgress]]:
        return {"jobs": await queue.list_jobs(limit)}

    @r.get("/rollouts/{job_id}", response_model=JobProgress, summary="Progress of a job")
    async def progress(job_id: str) -> JobProgress:
        return await queue.progress(job_id)

    @r.get("/rollouts/{job_id}/results", summary="Records as NDJSON, in completion order, resumable")
    async def results(
        job_id: str, cursor: str | None = None, wait: bool = False, limit: int | None = Query(None, ge=1)
    ):
        return await results_response(queue, job_id, cursor=cursor, wait=wait, limit=limit)

    @r.delete("/rollouts/{job_id}", response_model=JobProgress, summary="Cancel a job")
    async def cancel(job_id: str) -> JobProgress:
        prog = await queue.cancel(job_id)
        if metrics:
            metrics.jobs.labels("cancelled").inc()
            metrics.queue_depth.set(await queue.queued())
        return prog

    return r
