"""API dialects of the model server, one module each (Chat Completions, Anthropic Messages; the
Responses API is the internal form itself, answered by the service). A dialect converts its
request to a Responses body plus the options Responses has no field for, calls the service
(`prepare`, `complete`, `complete_stream`) and converts the Choices back, so adding an API is one
file and every API shares the engine, token-in/token-out and token capture."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from rollgate.core import jsonutil
from rollgate.core.errors import BadRequest, field_error
from rollgate.model_server.wire import STRICT

COMPONENT = "model"
# pydantic names union members in error locations ("str", "list[TextPart]"): not field names
_TYPE_TAG = {"str", "int", "float", "bool", "none", "dict", "list"}


def _union_tags(exc: ValidationError, skip: frozenset[str]) -> set[str]:
    """The location entries of exc that name a union member, not a field: basic types, the tags
    of tagged unions (`skip`), and pydantic's own ("list[TextPart]", "function-after[...]")."""
    return {
        p
        for e in exc.errors()
        for p in e.get("loc", ())
        if isinstance(p, str) and (p in _TYPE_TAG or p in skip or "[" in p or "-" in p)
    }


def validate(model: type[BaseModel], body: Any, skip: frozenset[str] = frozenset()) -> Any:
    """A request model, or a 400 naming the deepest offending field (`messages[2].content`)."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object", component=COMPONENT, field="body")
    try:
        return model.model_validate(body, strict=STRICT)
    except ValidationError as exc:
        raise field_error(exc, component=COMPONENT, skip=_union_tags(exc, skip), indexed=True, deepest=True) from None


def unsupported(field: str, why: str) -> BadRequest:
    return BadRequest(f"{field}: {why}", component=COMPONENT, field=field)


def sse_data(obj: Any) -> bytes:
    return b"data: " + jsonutil.dumps(obj) + b"\n\n"


def sse_event(kind: str, obj: Any) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + jsonutil.dumps(obj) + b"\n\n"


def token_fields(gen: Any) -> dict[str, Any]:
    """Training mode: the call's token data under NeMo Gym's names (as on Responses items)."""
    if gen is None or gen.token_ids is None:
        return {}
    return {
        "prompt_token_ids": gen.prompt_ids,
        "generation_token_ids": gen.token_ids,
        "generation_log_probs": gen.log_probs or [0.0] * len(gen.token_ids),
        "weight_version": gen.weight_version,
    }
