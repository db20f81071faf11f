"""NeMo Gym 0.7's resources-server protocol, as data: which routes of a server are tools (read off
its FastAPI `/openapi.json`), the Responses-API `response` object its `/verify` needs, and the
verdict read back from the answer. No I/O here; interop/nemo_gym.py does the talking."""

from __future__ import annotations

import copy
import math
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from rollgate.core import jsonutil
from rollgate.core.schemas import VerifyRequest, VerifyResult

# Routes of a NeMo Gym server that are never tools, whatever a row or a model calls them: the
# session and verification protocol, metrics, MCP and health. Compared case-insensitively.
NON_TOOL_ROUTES = frozenset(
    {
        "seed_session",
        "close_session",
        "verify",
        "aggregate_metrics",
        "reverify_mode",
        "mcp",
        "run",
        "v1",
        "global_config_dict_yaml",
        "server_instances",
        "stats",
        "health",
        "healthz",
        "readyz",
        "livez",
        "openapi.json",
        "docs",
        "redoc",
    }
)
# What a tool name may look like to be sent as `POST /<name>`: one plain path segment.
TOOL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
_PARAM_SEGMENT = re.compile(r"^\{[^/{}]+\}$")
_COMPONENT_REF = "#/components/schemas/"
# Fields of the verify answer that describe the request, not the verdict
_ECHOED = ("responses_create_params", "response")


def is_reserved(name: str) -> bool:
    return name.casefold() in NON_TOOL_ROUTES


def callable_name(name: str) -> bool:
    """A name that may go out as `POST /<name>`: one segment, and not a protocol route."""
    return bool(TOOL_NAME.match(name)) and not is_reserved(name)


@dataclass
class Discovered:
    """The tool routes of one server."""

    tools: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)  # name -> (description, schema)
    catch_all: bool = False  # a `POST /{name}` route: the row's tools say which names exist


def discover(doc: Any) -> Discovered:
    """Tools from an OpenAPI document: every `POST /<name>` route but the protocol's own, with the
    request body's schema as parameters. Raises ValueError when `doc` is not OpenAPI."""
    if not isinstance(doc, dict) or not isinstance(doc.get("paths"), dict):
        raise ValueError("the answer is not an OpenAPI document (no `paths`)")
    components = (doc.get("components") or {}).get("schemas") or {}
    found = Discovered()
    for path, ops in doc["paths"].items():
        post = ops.get("post") if isinstance(ops, dict) else None
        segments = str(path).strip("/").split("/")
        if not isinstance(post, dict) or len(segments) != 1:
            continue
        name = segments[0]
        if _PARAM_SEGMENT.match(name):
            found.catch_all = True
        elif callable_name(name):
            description = str(post.get("description") or post.get("summary") or "")
            found.tools[name] = (description, _body_schema(post, components))
    return found


def _body_schema(post: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    content = (post.get("requestBody") or {}).get("content") or {}
    schema = (content.get("application/json") or {}).get("schema")
    if not isinstance(schema, dict):
        return {"type": "object", "properties": {}}
    return inline_refs(schema, components)


def inline_refs(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """A self-contained JSON schema: `#/components/schemas/X` references become `#/$defs/X`, the
    top-level reference is inlined, and only the definitions still referenced are kept."""
    defs: dict[str, Any] = {}

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items()}
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_COMPONENT_REF):
            name = ref[len(_COMPONENT_REF) :]
            out["$ref"] = f"#/$defs/{name}"
            if name not in defs:
                defs[name] = {}  # placeholder first: a recursive schema stops here
                defs[name] = walk(copy.deepcopy(components.get(name, {})))
        return out

    top = walk(schema)
    seen: set[str] = set()
    while set(top) == {"$ref"} and top["$ref"].startswith("#/$defs/"):
        name = top["$ref"][len("#/$defs/") :]
        if name in seen:
            break
        seen.add(name)
        top = dict(defs.get(name, {}))
    top.pop("title", None)
    if top.get("type") == "object" or "properties" in top:
        top.setdefault("properties", {})
    used = _referenced(top, defs)
    if used:
        top["$defs"] = {k: defs[k] for k in sorted(used)}
    return top


def _referenced(top: dict[str, Any], defs: dict[str, Any]) -> set[str]:
    used: set[str] = set()
    todo = [top]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref[len("#/$defs/") :]
                if name not in used and name in defs:
                    used.add(name)
                    todo.append(defs[name])
            todo.extend(v for k, v in node.items() if k != "$defs")
        elif isinstance(node, list):
            todo.extend(node)
    return used


def row_tool_names(row: dict[str, Any]) -> list[str]:
    """The function tools a NeMo Gym row offers its model (`responses_create_params.tools`)."""
    tools = (row.get("responses_create_params") or {}).get("tools") or []
    return [t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]


# --- /verify ----------------------------------------------------------------------------------
def _text_part(part: Any) -> dict[str, Any]:
    if isinstance(part, str):
        return {"type": "output_text", "text": part, "annotations": []}
    part = dict(part)
    if part.get("type") in (None, "text", "input_text", "output_text"):
        part["type"] = "output_text"
        part.setdefault("text", "")
        part["annotations"] = list(part.get("annotations") or [])
    return part


def _output_item(item: dict[str, Any], i: int) -> dict[str, Any]:
    """One transcript item as NeMo Gym's response `output` validates it."""
    item = dict(item)
    kind = item.get("type", "message")
    if kind == "message" and item.get("role") == "assistant":
        content = item.get("content")
        parts = [content] if isinstance(content, str) else list(content or [])
        item.update(type="message", content=[_text_part(p) for p in parts])
        item.setdefault("id", f"msg_{i}")
        item["status"] = item.get("status") or "completed"
    elif kind == "message":
        item["type"] = "message"
    elif kind == "function_call":
        args = item.get("arguments", "{}")
        item["arguments"] = args if isinstance(args, str) else jsonutil.dumps_str(args)
        item.setdefault("call_id", item.get("id") or f"call_{i}")
    elif kind == "function_call_output":
        out = item.get("output", "")
        item["output"] = out if isinstance(out, str) else jsonutil.dumps_str(out)
    elif kind == "reasoning":
        item.setdefault("id", f"rs_{i}")
        item["summary"] = list(item.get("summary") or [])
    return item


def input_length(row: dict[str, Any]) -> int:
    raw = (row.get("responses_create_params") or {}).get("input", [])
    return 1 if isinstance(raw, str) else len(raw)


def response_object(row: dict[str, Any], request: VerifyRequest, *, model: str | None = None) -> dict[str, Any]:
    """The Responses-API object NeMo Gym's agents send to `/verify`: what the episode added after
    the row's input (model outputs and tool results), with the fields its validator requires."""
    params = row.get("responses_create_params") or {}
    transcript = request.transcript
    if transcript is not None:
        n = input_length(row)
        produced = transcript[n:] if len(transcript) >= n else transcript
        output = [_output_item(item, i) for i, item in enumerate(produced) if isinstance(item, dict)]
    else:
        text = request.response or ""
        output = [_output_item({"type": "message", "role": "assistant", "content": text}, 0)]
    return {
        "id": f"resp_{secrets.token_hex(12)}",
        "object": "response",
        "created_at": int(time.time()),
        "model": model or params.get("model") or "rollgate-policy",
        "output": output,
        "parallel_tool_calls": params.get("parallel_tool_calls", True),
        "tool_choice": params.get("tool_choice", "auto"),
        "tools": params.get("tools") or [],
        "status": "completed",
    }


class VerdictError(ValueError):
    """The verify answer is not a verdict (no numeric reward), or the server masked the sample."""


def read_verdict(answer: Any, request_fields: set[str]) -> VerifyResult:
    """The verdict in a `/verify` answer (the request echoed, plus `reward` and whatever the server
    adds). `reward_components` are kept when they sum to the reward (Rollgate's contract); other
    numeric fields the server added become metrics. A masked sample (`mask_sample`: the server says
    its reward is no valid measurement) is an environment failure, never a reward."""
    if not isinstance(answer, dict):
        raise VerdictError(f"the verify answer is {type(answer).__name__}, not an object")
    reward = answer.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        raise VerdictError(f"the verify answer has no numeric `reward` (got {reward!r})")
    if answer.get("mask_sample") is True:
        why = answer.get("failure_reason") or "no reason given"
        raise VerdictError(f"the server masked this sample ({answer.get('failure_kind') or 'failure'}: {why})")
    components = None
    raw = answer.get("reward_components")
    if isinstance(raw, dict) and raw and all(_number(v) for v in raw.values()):
        values = {str(k): float(v) for k, v in raw.items()}
        if abs(sum(values.values()) - float(reward)) <= 1e-6:
            components = values
    metrics: dict[str, Any] = {}
    for key, value in answer.items():
        if key in request_fields or key in _ECHOED or key in ("reward", "reward_components", "mask_sample"):
            continue
        if _number(value) or isinstance(value, bool):
            metrics[key] = value
    if answer.get("failure_kind"):
        metrics["failure_kind"] = str(answer["failure_kind"])
    if raw is not None and components is None and isinstance(raw, dict):
        metrics["reward_components"] = raw  # kept for reading, not as components: they do not sum
    return VerifyResult(reward=float(reward), reward_components=components, metrics=metrics)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
