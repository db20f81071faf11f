"""Responses API items as the agent handles them: normalising a row's input, reading token data
off output items, and the readable transcript (token fields stripped)."""

from __future__ import annotations

from typing import Any

from rollgate.core.errors import ProtocolError
from rollgate.core.items import TOKEN_FIELDS
from rollgate.core.schemas import Turn

TOKEN_AND_VERSION_FIELDS = (*TOKEN_FIELDS, "weight_version")


def input_items(raw: str | list[Any]) -> list[dict[str, Any]]:
    """A row's `input` as a list of items (a bare string is one user message)."""
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    return [dict(item) for item in raw]


def output_items(response: Any) -> list[dict[str, Any]]:
    if not isinstance(response, dict) or not isinstance(response.get("output"), list):
        raise ProtocolError("model response has no `output` list", component="model", field="output")
    return response["output"]


def turn_from_output(output: list[dict[str, Any]]) -> Turn | None:
    """The token data of one model call (training mode puts it on every model-produced item)."""
    for item in output:
        if "generation_token_ids" in item and "prompt_token_ids" in item:
            try:
                return Turn(
                    prompt_token_ids=item["prompt_token_ids"],
                    generation_token_ids=item["generation_token_ids"],
                    generation_log_probs=item.get("generation_log_probs") or [],
                    weight_version=item.get("weight_version"),
                )
            except ValueError as exc:
                raise ProtocolError(
                    f"model returned inconsistent token data: {exc}",
                    component="model",
                    field="output.generation_log_probs",
                ) from None
    return None


def extends(previous: Turn, current: Turn) -> bool:
    """Token-in/token-out holds when this prompt starts with all the previous turn's tokens."""
    prefix = previous.prompt_token_ids + previous.generation_token_ids
    return current.prompt_token_ids[: len(prefix)] == prefix


def readable(item: dict[str, Any]) -> dict[str, Any]:
    if not any(f in item for f in TOKEN_AND_VERSION_FIELDS):
        return item
    return {k: v for k, v in item.items() if k not in TOKEN_AND_VERSION_FIELDS}


def function_calls(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in output if i.get("type") == "function_call"]
