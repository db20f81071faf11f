"""What the gateway's routes accept and answer, for its OpenAPI document.

POST /v1/rollouts reads its body by hand (a bad field is a 400 naming it): the published body is
RolloutRequest's schema, its rows TaskRow's, the environments those this gateway serves. The
checks JSON Schema cannot state (across fields, against the environments' reward ranges) are
listed on the operation (`x-semantic-checks`, rollgate.core.openapi). The proxied model routes
publish the model server's own documents (rollgate.model_server.api_docs); the environment
routes are whatever the environment's resources server answers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi.responses import StreamingResponse

from rollgate.core.openapi import KEEPS, errors, inline_schema, json_body, link, semantic_checks
from rollgate.core.schemas import TaskRow
from rollgate.jobs.plan import RolloutRequest, reward_range
from rollgate.model_server.api_docs import CaptureSession, ModelShape, get_docs, post_docs, session_param

if TYPE_CHECKING:
    from rollgate.resources_servers.registry import EnvRegistry

NDJSON = "application/x-ndjson"


class NDJSONResponse(StreamingResponse):
    media_type = NDJSON


def rollout_request_schema(envs: list[str], registry: EnvRegistry | None) -> dict[str, Any]:
    schema = inline_schema(RolloutRequest)
    props = schema["properties"]
    row = inline_schema(TaskRow)
    row["properties"]["env"] = {"enum": [*envs, None], "description": "else the job's `env`"}
    props["tasks"] = {**props["tasks"], "type": "array", "minItems": 1, "items": row}
    props["env"] = {"enum": [*envs, None], "description": props["env"].get("description", "")}
    # eval_plan: k, threshold and pass_k belong to evaluation jobs
    schema["anyOf"] = [
        {"required": ["purpose"], "properties": {"purpose": {"const": "eval"}}},
        {"properties": {name: {"type": "null"} for name in ("k", "threshold", "pass_k")}},
    ]
    # check_threshold: inside the reward range of every environment (lo, hi]
    ranges = [reward_range(env, registry) for env in envs] or [(0.0, 1.0)]
    lo, hi = max(r[0] for r in ranges), min(r[1] for r in ranges)
    props["threshold"] = {"anyOf": [{"type": "number", "exclusiveMinimum": lo, "maximum": hi}, {"type": "null"}]}
    return schema


SUBMIT_CHECKS = semantic_checks(
    ("tasks[*].env", "a row that names no environment needs the job's `env` (unless the gateway serves one)"),
    ("tasks[*]", "a row is at most gateway.max_task_bytes of JSON"),
    ("k", 'evaluation jobs only ("purpose": "eval"); equal to repeats when both are given'),
    ("pass_k", "evaluation jobs only; every value in 1..k"),
    ("threshold", "evaluation jobs only; inside the reward range (lo, hi] of every environment of the job"),
    ("agent", "one of GET /v1/agents"),
)


JOB = "/v1/rollouts/{job_id}"
_JOB_ID = {"job_id": "$response.body#/job_id"}
SUBMIT_LINKS = {
    "progress": link(JOB, "get", **_JOB_ID),
    "results": link(JOB + "/results", "get", **_JOB_ID),
    "report": link(JOB + "/report", "get", **_JOB_ID),
    "cancel": link(JOB, "delete", **_JOB_ID),
}


def submit_docs(envs: list[str], registry: EnvRegistry | None) -> dict[str, Any]:
    return {
        "responses": {
            201: {"description": "The job is queued", "links": SUBMIT_LINKS},
            **errors(503),  # the queue is full: retry after Retry-After
        },
        "openapi_extra": {**json_body(rollout_request_schema(envs, registry)), **SUBMIT_CHECKS},
    }


CURSOR = "^(.+:[0-9]+)?$"  # "<job_id>:<position>", empty for the start (rollgate.gateway.stream.parse_cursor)
RESULTS_DOCS: dict[str, Any] = {
    "response_class": NDJSONResponse,
    "openapi_extra": semantic_checks(("cursor", "a cursor of this job, at most at its last record")),
    "responses": {
        200: {
            "description": "One JSON object a line: {cursor, type: trajectory | failure | heartbeat | end, record?, "
            "progress?} (rollgate.gateway.stream)",
        },
        **errors(400, 404),  # 400: a cursor of another job or past the end
    },
}
# 409: a training job (it has no report), or an evaluation job still running
REPORT_DOCS: dict[str, Any] = {"responses": errors(404, 409)}
JOB_DOCS: dict[str, Any] = {"responses": errors(404)}
# DELETE cancels: the job stays readable (its records, the `cancelled` ones included, are what a
# trainer reads next), so a read after it is no use-after-free. Said on the operation:
CANCEL_DOCS: dict[str, Any] = {
    "responses": errors(404),
    "openapi_extra": {KEEPS: "the job stays readable after it is cancelled: its progress and its records"},
}


# --- the proxied routes -------------------------------------------------------------------------

PROXY_ERRORS = (404, 502, 504)  # 404: no model server configured; 502/504: it failed or timed out


def model_route_docs(method: str, path: str, shape: ModelShape, *, capture: bool) -> dict[str, Any]:
    """The model server's documentation of a route, as the gateway forwards it (the route reads
    its parameters from the path itself, so they are declared here)."""
    docs = post_docs(path, shape, capture=capture) if method == "POST" else get_docs(path, capture=capture)
    extra = dict(docs.get("openapi_extra") or {})
    if "{response_id}" in path:
        param = {"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}
        extra["parameters"] = [*extra.get("parameters", []), param]
    return {**docs, "openapi_extra": extra or None, "responses": {**docs["responses"], **errors(*PROXY_ERRORS)}}


CAPTURES_DOCS: dict[str, Any] = {
    "response_model": CaptureSession,
    "responses": errors(400, *PROXY_ERRORS),
    "openapi_extra": {"parameters": [session_param(checked=True)]},
}
ENV_ROUTE_DOCS: dict[str, Any] = {
    "responses": {
        "default": {"description": "The environment's own answer (its resources server's OpenAPI document)"},
        **errors(*PROXY_ERRORS),
    },
    "openapi_extra": json_body({"description": "the environment route's own body"}, required=False),
}
