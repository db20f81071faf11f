"""One Trajectory's token turns and transcript from the calls a capture session recorded.

Where every call's prompt starts with the previous call's prompt + generation (the harness sent its
history back unchanged, so capture anchored each call on the exact ids before it), the turns are
one growing token sequence, exactly as the shipped loop's are. Where some call does not (a harness
that rewrites its history: smolagents turns earlier steps into plain text), each call is a
segment of its own and the trajectory is `segmented`: a trainer that flattens an episode into one
sequence must not train it as one (rollgate.core.tokens refuses it).

The transcript holds what the capture knows: the task's input, then each call's assistant output
(text and tool calls). What the harness sent in between (tool results, observations) is the
harness's own and not recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rollgate.agent_server.items import extends
from rollgate.core.schemas import Turn


@dataclass
class Assembled:
    turns: list[Turn] = field(default_factory=list)
    output: list[dict[str, Any]] = field(default_factory=list)  # readable items, call by call
    final_text: str = ""  # the last assistant text the harness received
    segmented: bool = False
    segments: int = 0
    calls: int = 0  # recorded calls (before the call budget's cut)
    output_tokens: int = 0
    dropped_calls: int = 0  # calls the capture store could not keep (its per-session bound)


def _choice(call: dict[str, Any], following: dict[str, Any] | None) -> dict[str, Any] | None:
    """The choice the harness went on with: the one the next prompt starts with, else the first."""
    choices = call.get("choices") or []
    if following is not None and len(choices) > 1:
        nxt = following.get("prompt_token_ids") or []
        for c in choices:
            prefix = list(call.get("prompt_token_ids") or []) + list(c.get("generation_token_ids") or [])
            if nxt[: len(prefix)] == prefix:
                return c
    return choices[0] if choices else None


def output_items(message: dict[str, Any], call_index: int) -> list[dict[str, Any]]:
    """An assistant chat message as Responses-style output items (the readable transcript)."""
    items: list[dict[str, Any]] = []
    text = message.get("content") or ""
    if text:
        items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
    for j, tc in enumerate(message.get("tool_calls") or []):
        fn = tc.get("function") or {}
        items.append(
            {
                "type": "function_call",
                "call_id": f"call_{call_index}_{j}",
                "name": fn.get("name", ""),
                "arguments": fn.get("arguments", "{}"),
            }
        )
    return items


def assemble(record: dict[str, Any] | None, *, max_calls: int | None = None) -> Assembled:
    """`record`: a capture session (`GET /v1/captures/{session}`), or None when it has no call."""
    out = Assembled()
    if not record:
        return out
    calls = sorted(record.get("calls") or [], key=lambda c: c.get("index", 0))
    out.calls = len(calls)
    out.dropped_calls = int(record.get("dropped_calls") or 0)
    kept = calls if max_calls is None else calls[:max_calls]
    for i, call in enumerate(kept):
        choice = _choice(call, kept[i + 1] if i + 1 < len(kept) else None)
        if choice is None:
            continue
        turn = Turn(
            prompt_token_ids=list(call.get("prompt_token_ids") or []),
            generation_token_ids=list(choice.get("generation_token_ids") or []),
            generation_log_probs=list(choice.get("generation_log_probs") or []),
            finish_reason=choice.get("finish_reason"),
            weight_version=choice.get("weight_version"),
        )
        if not out.turns or not extends(out.turns[-1], turn):
            out.segments += 1
        out.turns.append(turn)
        out.output_tokens += len(turn.generation_token_ids)
        message = choice.get("message") or {}
        out.output.extend(output_items(message, call.get("index", i)))
        text = (message.get("content") or "").strip()
        if text:
            out.final_text = text
    out.segmented = out.segments > 1
    return out
