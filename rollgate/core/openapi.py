"""The OpenAPI document of every service says what its routes enforce.

Routes that read their body by hand (the hot routes, and routes whose bad field must be a 400
naming it) are invisible to FastAPI's schema generation; they publish the schema of the pydantic
model they do validate with (`json_body(Model)`), so the document and the validation have one
source. Every error any route answers has one shape, `ErrorResponse` (rollgate.core.errors,
rollgate.core.app); routes name their own error statuses with `errors(404, ...)`, and
`finish_openapi` adds those every route shares: 500, 401 where a bearer token is required, and
400 / 413 / 422 wherever a body is read. Apps, routers and mounted ASGI apps may add paths of
their own (`OpenAPIPaths`)."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from rollgate.core import jsonutil
from rollgate.core.schemas import MAX_JSON_INT, ErrorKind

METHODS = ("get", "put", "post", "delete", "patch", "options", "head", "trace")
COMPONENTS = "#/components/schemas/"


class ErrorDetail(BaseModel):
    field: str
    message: str


class ErrorBody(BaseModel):
    kind: ErrorKind
    component: str = Field(description="the part that failed: model | env:<name> | agent | gateway | sandbox | ...")
    message: str
    field: str | None = Field(None, description="the offending input field, where there is one")
    code: str | None = Field(None, description="a finer type than kind, e.g. context_exhausted")
    details: list[ErrorDetail] | None = Field(None, description="422: every field that failed (up to 20)")


class ErrorResponse(BaseModel):
    """The body of every 4xx and 5xx answer."""

    error: ErrorBody


STATUS_TEXT: dict[int, str] = {
    400: "Bad request: malformed JSON, or a field the route checks (named in error.field)",
    401: "Missing or wrong bearer token",
    404: "Not found (error.field names what was looked up)",
    409: "Conflict with the resource's current state",
    413: "Request body over the size limit",
    422: "A parameter or body field failed validation (error.details lists them)",
    500: "Internal error",
    501: "Not implemented here (e.g. by this backend); nothing changed",
    502: "A dependency answered an error or could not be reached",
    503: "At capacity or starting: retry after Retry-After seconds",
    504: "A dependency timed out",
}
RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer"}}}


def error_response(status: int, description: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"model": ErrorResponse, "description": description or STATUS_TEXT[status]}
    if status == 503:
        out["headers"] = RETRY_AFTER
    return out


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` of a route: its own error statuses, each with the error body."""
    return {status: error_response(status) for status in statuses}


# The integers a wire model takes (rollgate.core.schemas.JsonInt)
INT_MIN, INT_MAX = -MAX_JSON_INT, MAX_JSON_INT
# pydantic leaves a constraint on an optional JsonInt under its own name: the JSON Schema names
_BOUNDS = {"gt": "exclusiveMinimum", "ge": "minimum", "lt": "exclusiveMaximum", "le": "maximum"}


def inline_schema(model: type[BaseModel] | Any, *, mode: str = "validation") -> dict[str, Any]:
    """A model's (or TypeAdapter's) JSON schema with its $defs inlined, for `openapi_extra`, where
    FastAPI does not collect definitions; unbounded integers get the JSON parser's range. A copy:
    callers narrow it."""
    return jsonutil.loads(jsonutil.dumps(_inline_cached(model, mode)))  # a deep copy, 10x faster


@functools.cache
def _inline_cached(model: Any, mode: str) -> dict[str, Any]:
    # every app (and every lazily built environment router) documents the same few models
    return bound_integers(_inline(model.model_json_schema(mode=mode)))


def bound_integers(node: Any) -> Any:
    if isinstance(node, dict):
        if node.get("type") in ("integer", "number"):
            for name, keyword in _BOUNDS.items():
                if name in node:
                    node[keyword] = node.pop(name)
        if node.get("type") == "integer":
            if "minimum" not in node and "exclusiveMinimum" not in node:
                node["minimum"] = INT_MIN
            if "maximum" not in node and "exclusiveMaximum" not in node:
                node["maximum"] = INT_MAX
        for value in node.values():
            bound_integers(value)
    elif isinstance(node, list):
        for value in node:
            bound_integers(value)
    return node


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    schema = copy.deepcopy(schema)
    defs = schema.pop("$defs", {})

    def resolve(node: Any, seen: frozenset[str]) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref.removeprefix("#/$defs/")
                if name in seen:
                    raise ValueError(f"recursive schema {name}: give the route a component instead")
                return resolve({**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}, seen | {name})
            return {k: resolve(v, seen) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v, seen) for v in node]
        return node

    return resolve(schema, frozenset())


def link(path: str, method: str, **parameters: str) -> dict[str, Any]:
    """An OpenAPI link to the operation `method path` (for a response's `links`): what a client,
    or a stateful fuzzer, calls next with what this answer holds, e.g. job_id="$response.body#/job_id"."""
    pointer = path.replace("~", "~0").replace("/", "~1")
    return {"operationRef": f"#/paths/{pointer}/{method.lower()}", "parameters": parameters}


SEMANTIC = "x-semantic-checks"
# on a DELETE that ends a resource's activity but keeps it readable (a cancelled job): why
KEEPS = "x-keeps-resource"


def semantic_checks(*rules: tuple[str, str]) -> dict[str, Any]:
    """`openapi_extra` naming the checks a route makes that JSON Schema cannot state (across
    fields, or against the server's state): each `(field, rule)` is a 400 whose error.field is
    `field` (`[*]` stands for any index). Generators and fuzzers read it to know that a
    schema-valid body may still be refused, and for what."""
    return {SEMANTIC: [{"field": field, "rule": rule} for field, rule in rules]}


def json_body(schema: type[BaseModel] | dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    """`openapi_extra` of a route that reads its JSON body by hand."""
    if not isinstance(schema, dict):
        schema = inline_schema(schema)
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": schema}}}}


def json_content(schema: type[BaseModel] | dict[str, Any], description: str) -> dict[str, Any]:
    """A `responses=` entry whose JSON body is `schema` (a model or a plain schema)."""
    if not isinstance(schema, dict):
        schema = inline_schema(schema, mode="serialization")
    return {"description": description, "content": {"application/json": {"schema": schema}}}


@runtime_checkable
class OpenAPIPaths(Protocol):
    """A mounted ASGI app that documents its own paths (FastAPI cannot see inside a mount)."""

    def openapi_paths(self, prefix: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """(paths, component schemas) of this app, its paths starting with `prefix`."""
        ...


def install_openapi(app: Any) -> None:
    """Wrap `app.openapi` so the document is finished once per (re)generation."""
    base = app.openapi
    done: dict[str, Any] = {}

    def openapi() -> dict[str, Any]:
        doc = base()
        if done.get("doc") is not doc:
            finish_openapi(app, doc)
            done["doc"] = doc
        return doc

    app.openapi = openapi


def documented_mounts(routes: list[Any], prefix: str = "") -> list[tuple[str, OpenAPIPaths]]:
    """Self-documenting mounts, in included routers too (FastAPI keeps those nested)."""
    out = []
    for route in routes:
        inner = getattr(route, "app", None)
        if isinstance(inner, OpenAPIPaths) and hasattr(route, "path"):
            out.append((prefix + route.path, inner))
        included = getattr(route, "original_router", None)
        if included is not None:
            context = getattr(route, "include_context", None)
            out += documented_mounts(included.routes, prefix + getattr(context, "prefix", ""))
    return out


def _mounted_paths(app: Any, doc: dict[str, Any]) -> None:
    for path, inner in documented_mounts(app.router.routes):
        paths, schemas = inner.openapi_paths(path)
        doc.setdefault("paths", {}).update(paths)
        doc.setdefault("components", {}).setdefault("schemas", {}).update(schemas)
    for hook in getattr(app.state, "openapi_hooks", ()):
        hook(doc)


def add_openapi_hook(app: Any, hook: Callable[[dict[str, Any]], None]) -> None:
    """`hook(doc)` runs on the generated document before the shared error answers are added."""
    if not hasattr(app.state, "openapi_hooks"):
        app.state.openapi_hooks = []
    app.state.openapi_hooks.append(hook)


def finish_openapi(app: Any, doc: dict[str, Any]) -> None:
    _mounted_paths(app, doc)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    error_schema = ErrorResponse.model_json_schema(ref_template=COMPONENTS + "{model}")
    schemas.update(error_schema.pop("$defs", {}))
    schemas["ErrorResponse"] = error_schema
    auth = getattr(app.state, "auth", None)  # set by rollgate.core.auth.require_bearer
    if auth is not None:
        doc["components"].setdefault("securitySchemes", {})["bearer"] = {"type": "http", "scheme": "bearer"}
    for path, item in doc.get("paths", {}).items():
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            responses = op.setdefault("responses", {})
            shared = [500]
            if "requestBody" in op:
                shared += [400, 413, 422]
            if auth is not None and not auth.is_open(path):
                shared.append(401)
                op["security"] = [{"bearer": []}]
            for status in shared:
                responses.setdefault(str(status), _error_entry(status))
            for status, entry in responses.items():
                # FastAPI documents its own 422 body; every error here answers ErrorResponse
                if status.isdigit() and int(status) >= 400:
                    _error_content(entry)
    for name in ("HTTPValidationError", "ValidationError"):
        if not _referenced(doc, COMPONENTS + name):
            schemas.pop(name, None)


def _error_entry(status: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"description": STATUS_TEXT[status]}
    _error_content(entry)
    if status == 503:
        entry["headers"] = RETRY_AFTER
    return entry


def _error_content(entry: dict[str, Any]) -> None:
    # Errors are JSON whatever the route's own media type (FastAPI files them under it).
    content = entry.setdefault("content", {})
    schema = content.get("application/json", {}).get("schema")
    if schema is None or schema.get("$ref") == COMPONENTS + "HTTPValidationError":
        schema = {"$ref": COMPONENTS + "ErrorResponse"}
    entry["content"] = {"application/json": {"schema": schema}}


def _referenced(node: Any, ref: str) -> bool:
    if isinstance(node, dict):
        return node.get("$ref") == ref or any(_referenced(v, ref) for v in node.values())
    if isinstance(node, list):
        return any(_referenced(v, ref) for v in node)
    return False
