"""What a resources server's routes accept and answer, for its OpenAPI document.

The native routes read their bodies by hand (the hot routes of rollgate.core.app); their
documented bodies are the schemas of the models they validate with: the task row (TaskRow, plus
the environment's own `Row` where it declares one), VerifyRequest, and the tool call's
`{arguments}`. A tool's arguments are checked by the tool's own model, but a bad argument is a
200 with an error output the model reads (the contract in DESIGN.md), so the document does not
bind them to the tool's parameters: GET /tools lists those."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rollgate.core.openapi import errors, inline_schema, json_body, semantic_checks
from rollgate.core.schemas import SeedResponse, TaskRow, ToolOutput, VerifyRequest, VerifyResult
from rollgate.resources_servers.base import EnvRuntime

_NULL = {"type": "null"}


class ToolSchema(BaseModel):
    """One tool in OpenAI's function format."""

    model_config = ConfigDict(extra="allow")
    type: Literal["function"]
    name: str
    description: str
    parameters: dict[str, Any] = Field(description="JSON schema of the arguments")


class CompatVerifyResult(VerifyResult):
    """NeMo Gym's /verify answer: the request's fields, plus the result."""

    model_config = ConfigDict(extra="allow")


def row_schema(runtime: EnvRuntime, *, params_required: bool = True) -> dict[str, Any]:
    """A task row as this environment's seed route takes it: TaskRow (its `env` this one's name, or
    none) plus the fields of the environment's `Row`."""
    schema = inline_schema(TaskRow)
    props = schema["properties"]
    props["env"] = {"enum": [runtime.name, None], "description": "this environment, or none"}
    required = list(schema.get("required", []))
    if runtime.env.Row is not None:
        own = inline_schema(runtime.env.Row)
        props.update(own.get("properties", {}))
        required += own.get("required", [])
    if not params_required:
        required.remove("responses_create_params")
    schema["required"] = required
    return schema


TOOL_CALL = {
    "type": "object",
    "properties": {
        "arguments": {
            "description": "the tool's arguments: an object (or its JSON text) as GET /tools describes; a bad "
            "argument is a 200 whose output says what is wrong (is_error: true)",
        }
    },
}


def tool_call_docs(runtime: EnvRuntime) -> dict[str, Any]:
    body: dict[str, Any] = TOOL_CALL
    if runtime.env.roles:  # a multi-role environment: the caller names its role (docs/roles.md)
        role = {"enum": list(runtime.env.roles), "description": "the role that calls; out of turn: an error output"}
        body = {**TOOL_CALL, "properties": {**TOOL_CALL["properties"], "role": role}, "required": ["role"]}
    return {
        "response_model": ToolOutput,
        "responses": errors(404),  # unknown session or tool
        "openapi_extra": json_body(body),
    }


def row_checks(runtime: EnvRuntime) -> dict[str, Any]:
    """An environment without a `Row` model checks its fields in `seed`: a 400 naming `row`."""
    if runtime.env.Row is not None:
        return {}
    return semantic_checks(("row", f"the fields {runtime.name} reads from a row, checked when it seeds"))


def seed_docs(runtime: EnvRuntime) -> dict[str, Any]:
    return {
        "response_model": SeedResponse,
        "responses": errors(503),  # the session store is full
        "openapi_extra": {**json_body(row_schema(runtime)), **row_checks(runtime)},
    }


VERIFY_DOCS: dict[str, Any] = {
    "response_model": VerifyResult,
    "responses": errors(404),
    "openapi_extra": json_body(VerifyRequest),
}
TOOLS_DOCS: dict[str, Any] = {"response_model": list[ToolSchema]}
DELETE_DOCS: dict[str, Any] = {"responses": {204: {"description": "Closed (also when it was already gone)"}}}


# --- NeMo Gym's routes --------------------------------------------------------------------------

SESSION_PARAMS = [
    {
        "name": "x-session-id",
        "in": "header",
        "required": False,
        "description": "the session (else the rollgate_session cookie that /seed_session set)",
        "schema": {"type": "string"},
    },
    {"name": "rollgate_session", "in": "cookie", "required": False, "schema": {"type": "string"}},
]


def compat_seed_docs(runtime: EnvRuntime) -> dict[str, Any]:
    """No body is an empty row: fine unless the environment's row has required fields."""
    row = row_schema(runtime, params_required=False)
    return {
        "response_model": SeedResponse,
        "responses": errors(503),
        "openapi_extra": {**json_body(row, required=bool(row["required"])), **row_checks(runtime)},
    }


def compat_verify_docs(runtime: EnvRuntime) -> dict[str, Any]:
    """With a session (header or cookie) the body's `response` is verified against it; without,
    the body is a row (stateless NeMo Gym verify)."""
    body = row_schema(runtime, params_required=False)
    body["properties"]["response"] = {"description": "a Responses API response (or its text)"}
    return {
        "response_model": CompatVerifyResult,
        "responses": errors(404, 503),
        "openapi_extra": {**json_body(body), "parameters": SESSION_PARAMS, **row_checks(runtime)},
    }


# OpenAPI cannot say "this header or that cookie": the header is the documented way; NeMo Gym's
# agents send the cookie /seed_session set, which the route takes all the same
SESSION_HEADER = {
    **SESSION_PARAMS[0],
    "required": True,
    "description": "the session (NeMo Gym's agents send the rollgate_session cookie instead)",
    "schema": {"type": "string", "minLength": 1},
}


def compat_tool_docs(runtime: EnvRuntime) -> dict[str, Any]:
    """A tool by its own path; the body is its arguments."""
    body = json_body({"description": TOOL_CALL["properties"]["arguments"]["description"]}, required=False)
    return {
        "response_model": ToolOutput,
        "responses": errors(404),
        "openapi_extra": {**body, "parameters": [SESSION_HEADER]},
    }
