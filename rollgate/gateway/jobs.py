"""Rollout jobs: the routes (the request and its planning are rollgate.jobs.plan).

POST /v1/rollouts            {tasks, env?, repeats, sampling, policy_version?, purpose?, k?, threshold?,
                             pass_k?, retry_errors?, priority?} -> {job_id, num_tasks}
GET  /v1/rollouts            recent jobs with their progress (the viewer's job list)
GET  /v1/rollouts/summary    finished jobs per policy version: training reward and evaluation results
GET  /v1/rollouts/{job}      progress: state, done/total, counts by outcome, mean reward
GET  /v1/rollouts/{job}/report   the evaluation report of a finished `purpose: "eval"` job
GET  /v1/rollouts/{job}/results?cursor=C&wait=true   NDJSON records (see rollgate.gateway.stream)
DELETE /v1/rollouts/{job}    cancel: every unfinished task gets one `cancelled` record
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ValidationError

from rollgate.core.app import read_json
from rollgate.core.errors import BadRequest
from rollgate.core.metrics import Metrics
from rollgate.gateway.evals import MAX_REPORTS_PER_SUMMARY, EvalReports
from rollgate.gateway.stream import results_response
from rollgate.jobs.plan import COMPONENT, RolloutRequest, SubmitResponse, plan_job
from rollgate.jobs.queue import JobProgress, JobQueue


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema with its $defs inlined. The body is read by hand (so a bad field is
    a 400 naming it, not FastAPI's 422), so FastAPI does not see the model: the OpenAPI document
    gets it from here instead."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return resolve(schema)


REQUEST_SCHEMA = inline_schema(RolloutRequest)


def jobs_router(
    queue: JobQueue,
    *,
    known_envs: Callable[[], list[str]],
    model_name: str,
    max_task_bytes: int,
    retry_errors: int = 0,
    metrics: Metrics | None = None,
) -> APIRouter:
    metrics = metrics if metrics is not None else Metrics.off()
    r = APIRouter(prefix="/v1", tags=["rollouts"])
    reports = EvalReports(queue)

    @r.get("/envs", summary="Environments this gateway can run jobs on")
    async def list_envs() -> dict[str, list[str]]:
        return {"envs": sorted(known_envs())}

    @r.post(
        "/rollouts",
        response_model=SubmitResponse,
        status_code=201,
        summary="Submit a rollout job",
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": REQUEST_SCHEMA}}}},
    )
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
        spec, tasks = plan_job(
            req,
            known_envs=known_envs(),
            model_name=model_name,
            max_task_bytes=max_task_bytes,
            retry_errors=retry_errors,
        )
        await queue.submit(spec, tasks)
        metrics.jobs.labels("submitted").inc()
        metrics.queue_depth.set(await queue.queued())
        return SubmitResponse(
            job_id=spec.job_id,
            num_tasks=spec.num_tasks,
            num_rows=spec.num_rows,
            repeats=spec.repeats,
            purpose=spec.purpose,
        )

    @r.get("/rollouts", summary="Recent jobs, newest first")
    async def list_jobs(limit: int = Query(100, ge=1, le=1000)) -> dict[str, list[JobProgress]]:
        return {"jobs": await queue.list_jobs(limit)}

    # Registered before /rollouts/{job_id}, which would otherwise take "summary" for a job id.
    @r.get("/rollouts/summary", summary="Finished jobs per policy version: training reward and evaluations")
    async def summary(
        limit: int = Query(200, ge=1, le=1000, description="the most recent jobs considered"),
    ) -> dict[str, Any]:
        return await reports.summary(await queue.list_jobs(limit), max_reports=MAX_REPORTS_PER_SUMMARY)

    @r.get("/rollouts/{job_id}", response_model=JobProgress, summary="Progress of a job")
    async def progress(job_id: str) -> JobProgress:
        return await queue.progress(job_id)

    @r.get("/rollouts/{job_id}/results", summary="Records as NDJSON, in completion order, resumable")
    async def results(
        job_id: str, cursor: str | None = None, wait: bool = False, limit: int | None = Query(None, ge=1)
    ):
        return await results_response(queue, job_id, cursor=cursor, wait=wait, limit=limit)

    @r.get("/rollouts/{job_id}/report", summary="Evaluation report of a finished evaluation job")
    async def report(job_id: str) -> dict[str, Any]:
        """Per environment and overall: mean reward, pass@k (and majority@k where the environment
        exposes an answer) with 95% bootstrap intervals over tasks; failures counted apart.
        409 while the job runs; 400 for a training job."""
        return await reports.report(job_id)

    @r.delete("/rollouts/{job_id}", response_model=JobProgress, summary="Cancel a job")
    async def cancel(job_id: str) -> JobProgress:
        prog = await queue.cancel(job_id)
        metrics.jobs.labels("cancelled").inc()
        metrics.queue_depth.set(await queue.queued())
        return prog

    return r
