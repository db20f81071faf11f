"""Rollout jobs: the routes (the request and its planning are rollgate.jobs.plan).

POST /v1/rollouts            {tasks, env?, agent?, repeats, sampling, policy_version?, purpose?, k?,
                             threshold?, pass_k?, retry_errors?, priority?, roles?} -> {job_id, num_tasks}
GET  /v1/agents              the agents a job may name (rollgate.agent_server.plugins)
GET  /v1/rollouts            recent jobs with their progress (the viewer's job list)
GET  /v1/rollouts/summary    finished jobs per policy version: training reward and evaluation results
GET  /v1/rollouts/{job}      progress: state, done/total, counts by outcome, mean reward
GET  /v1/rollouts/{job}/report   the evaluation report of a finished `purpose: "eval"` job
GET  /v1/rollouts/{job}/results?cursor=C&wait=true   NDJSON records (see rollgate.gateway.stream)
DELETE /v1/rollouts/{job}    cancel: every unfinished task gets one `cancelled` record
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Query, Request
from pydantic import ValidationError

from rollgate.agent_server.plugins import DEFAULT_AGENT, AgentRegistry
from rollgate.core.app import read_json
from rollgate.core.errors import BadRequest, field_error
from rollgate.core.metrics import Metrics
from rollgate.gateway import api_docs
from rollgate.gateway.evals import MAX_REPORTS_PER_SUMMARY, EvalReports
from rollgate.gateway.stream import results_response
from rollgate.jobs.plan import COMPONENT, RolloutRequest, SubmitResponse, plan_job
from rollgate.jobs.queue import JobProgress, JobQueue

if TYPE_CHECKING:
    from rollgate.resources_servers.registry import EnvRegistry


def jobs_router(
    queue: JobQueue,
    *,
    known_envs: Callable[[], list[str]],
    model_name: str,
    max_task_bytes: int,
    retry_errors: int = 0,
    metrics: Metrics | None = None,
    agents: AgentRegistry | None = None,
    known_models: list[str] | None = None,
    registry: EnvRegistry | None = None,
) -> APIRouter:
    """`registry`: the environments whose classes this gateway knows (roles and reward ranges are
    checked at submit for those; the others' workers check them)."""
    metrics = metrics if metrics is not None else Metrics.off()
    r = APIRouter(prefix="/v1", tags=["rollouts"])
    reports = EvalReports(queue)

    @r.get("/envs", summary="Environments this gateway can run jobs on")
    async def list_envs() -> dict[str, list[str]]:
        return {"envs": sorted(known_envs())}

    @r.get("/agents", summary="Agents a job may name in `agent`, and why one cannot run")
    async def list_agents() -> dict[str, Any]:
        listed = agents.describe() if agents is not None else []
        return {"agents": listed, "default": DEFAULT_AGENT}

    @r.post(
        "/rollouts",
        response_model=SubmitResponse,
        status_code=201,
        summary="Submit a rollout job",
        **api_docs.submit_docs(sorted(known_envs()), registry),
    )
    async def submit(request: Request) -> SubmitResponse:
        body = await read_json(request, component=COMPONENT)
        if not isinstance(body, dict):
            raise BadRequest('body must be a JSON object {"tasks": [...]}', component=COMPONENT, field="body")
        try:
            req = RolloutRequest.model_validate(body, strict=True)  # as its JSON schema says: no "3" for 3
        except ValidationError as exc:
            raise field_error(exc, component=COMPONENT) from None
        spec, tasks = plan_job(
            req,
            known_envs=known_envs(),
            model_name=model_name,
            max_task_bytes=max_task_bytes,
            retry_errors=retry_errors,
            known_agents=agents.names() if agents is not None else None,
            role_agents=agents.role_agents() if agents is not None else None,
            known_models=known_models,
            registry=registry,
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

    @r.get("/rollouts/{job_id}", response_model=JobProgress, summary="Progress of a job", **api_docs.JOB_DOCS)
    async def progress(job_id: str) -> JobProgress:
        return await queue.progress(job_id)

    @r.get(
        "/rollouts/{job_id}/results",
        summary="Records as NDJSON, in completion order, resumable",
        **api_docs.RESULTS_DOCS,
    )
    async def results(
        job_id: str,
        cursor: str | None = Query(None, json_schema_extra={"pattern": api_docs.CURSOR}),
        wait: bool = False,
        limit: int | None = Query(None, ge=1),
    ):
        return await results_response(queue, job_id, cursor=cursor, wait=wait, limit=limit)

    @r.get(
        "/rollouts/{job_id}/report",
        summary="Evaluation report of a finished evaluation job",
        **api_docs.REPORT_DOCS,
    )
    async def report(job_id: str) -> dict[str, Any]:
        """Per environment and overall: mean reward, pass@k (and majority@k where the environment
        exposes an answer) with 95% bootstrap intervals over tasks; failures counted apart.
        409 while the job runs; 400 for a training job."""
        return await reports.report(job_id)

    @r.delete("/rollouts/{job_id}", response_model=JobProgress, summary="Cancel a job", **api_docs.CANCEL_DOCS)
    async def cancel(job_id: str) -> JobProgress:
        prog = await queue.cancel(job_id)
        metrics.jobs.labels("cancelled").inc()
        metrics.queue_depth.set(await queue.queued())
        return prog

    return r
