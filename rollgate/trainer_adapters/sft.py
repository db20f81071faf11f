"""Trajectories as chat transcripts for supervised fine-tuning (distillation of good episodes).

Responses-style items become chat-format messages as Hugging Face chat templates (and TRL's
SFTTrainer with a `messages` column) expect them: system/user/assistant/tool roles, tool calls on
the assistant message with JSON arguments parsed to objects, tool results as `tool` messages.
"""

from __future__ import annotations

from typing import Any

from rollgate.core import jsonutil
from rollgate.core.items import content_text
from rollgate.core.schemas import Outcome, Trajectory

_ROLE = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return jsonutil.loads(raw)
        except ValueError:
            return raw  # keep what the model wrote; the template renders it as text
    return raw


def chat_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Convert a Responses transcript to chat messages. A model call's reasoning, text and tool
    calls merge into one assistant message, as chat templates render a single assistant turn."""
    out: list[dict[str, Any]] = []
    open_assistant: dict[str, Any] | None = None  # the assistant message the current call is filling

    def assistant() -> dict[str, Any]:
        nonlocal open_assistant
        if open_assistant is None:
            open_assistant = {"role": "assistant", "content": ""}
            out.append(open_assistant)
        return open_assistant

    for item in items:
        kind = item.get("type", "message")
        if kind == "reasoning":
            text = content_text(item.get("summary")) or content_text(item.get("content"))
            msg = assistant()
            msg["reasoning_content"] = msg.get("reasoning_content", "") + text
        elif kind == "function_call":
            call = {
                "id": item.get("call_id") or item.get("id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": _arguments(item.get("arguments"))},
            }
            assistant().setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            open_assistant = None
            out.append(
                {"role": "tool", "tool_call_id": item.get("call_id"), "content": content_text(item.get("output"))}
            )
        elif kind == "message":
            role = _ROLE.get(str(item.get("role")), "user")
            if role == "assistant":
                msg = assistant()
                msg["content"] += content_text(item.get("content"))
            else:
                open_assistant = None
                out.append({"role": role, "content": content_text(item.get("content"))})
        # Other item kinds (images, hosted tool traces) have no chat-format equivalent: skipped.
    return out


def chat_tools(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The row's Responses-format function tools in chat format ({"type", "function": {...}})."""
    tools = row.get("responses_create_params", {}).get("tools") or []
    out = []
    for t in tools:
        if isinstance(t, dict) and t.get("type", "function") == "function":
            fn = t.get("function") or {k: t[k] for k in ("name", "description", "parameters") if k in t}
            out.append({"type": "function", "function": fn})
    return out


def keep_for_sft(traj: Trajectory, min_reward: float | None) -> bool:
    """Successful episodes only: completed, and reward >= min_reward (or > 0 without a threshold)."""
    if traj.outcome is not Outcome.completed or traj.reward is None:
        return False
    return traj.reward >= min_reward if min_reward is not None else traj.reward > 0


def to_sft_record(traj: Trajectory) -> dict[str, Any]:
    record: dict[str, Any] = {"messages": chat_messages(traj.messages)}
    tools = chat_tools(traj.task.row)
    if tools:
        record["tools"] = tools
    record.update(trajectory_id=traj.trajectory_id, env=traj.task.env, task_id=traj.task.task_id, reward=traj.reward)
    if traj.role is not None:  # a multi-role episode's trajectory: whose transcript this is
        record.update(role=traj.role, episode_id=traj.episode_id)
    return record
