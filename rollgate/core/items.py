"""Reading Responses API items: the one set of text readers the agent, the environments, the
verifiers, the exports and the NeMo Gym routes share."""

from __future__ import annotations

from typing import Any

# One Responses API item as it travels (a message, function_call, function_call_output, reasoning
# ...): plain JSON, kept as a dict so an item of a type this code does not know passes through.
Item = dict[str, Any]

# The token fields training mode puts on model-produced output items (NeMo Gym's names).
TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")


def content_text(content: Any) -> str:
    """Text of a `content` value: a plain string, or the text of its parts (dicts with `text`,
    or bare strings), concatenated."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            c if isinstance(c, str) else c["text"]
            for c in content
            if isinstance(c, str) or (isinstance(c, dict) and isinstance(c.get("text"), str))
        )
    return ""


def message_text(item: dict[str, Any]) -> str:
    """The text of a message item."""
    return content_text(item.get("content"))


def is_assistant_message(item: dict[str, Any]) -> bool:
    return item.get("type", "message") == "message" and item.get("role", "assistant") == "assistant"


def output_text(output: list[Any]) -> str:
    """The assistant's text in a list of output items (the final answer of a model call)."""
    return "".join(message_text(i) for i in output if isinstance(i, dict) and is_assistant_message(i))


def response_text(body: Any) -> str:
    """The text of a Responses API body (or a bare string): `output_text`, else its messages."""
    if isinstance(body, str):
        return body
    if not isinstance(body, dict):
        return ""
    if isinstance(body.get("output_text"), str) and body["output_text"]:
        return body["output_text"]
    output = body.get("output")
    return output_text(output) if isinstance(output, list) else ""


def last_assistant_text(transcript: list[dict[str, Any]]) -> str:
    """The last assistant message's text in a transcript (empty when there is none)."""
    for item in reversed(transcript):
        if item.get("type", "message") == "message" and item.get("role") == "assistant":
            return message_text(item)
    return ""
