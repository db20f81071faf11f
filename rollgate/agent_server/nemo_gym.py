"""NeMo Gym's `/run` response for a trajectory: what the agent server answers with
`POST /run?format=nemo_gym`, so NeMo RL's rollout post-processing reads Rollgate unchanged."""

from __future__ import annotations

import time
from typing import Any

from rollgate.core.errors import ProtocolError
from rollgate.core.schemas import Trajectory
from rollgate.core.tokens import segments

# Output item types the model produces (besides assistant messages).
_MODEL_ITEM_TYPES = ("function_call", "reasoning")


def _is_model_item(item: dict[str, Any]) -> bool:
    kind = item.get("type", "message")
    return kind in _MODEL_ITEM_TYPES or (kind == "message" and item.get("role") == "assistant")


def _model_call_groups(items: list[dict[str, Any]]) -> list[list[int]]:
    """Indices of the output items each model call produced: maximal runs of model items."""
    groups: list[list[int]] = []
    prev_model = False
    for i, item in enumerate(items):
        if _is_model_item(item):
            if not prev_model:
                groups.append([])
            groups[-1].append(i)
            prev_model = True
        else:
            prev_model = False
    return groups


def _input_len(traj: Trajectory) -> int:
    raw = traj.task.row.get("responses_create_params", {}).get("input", [])
    n = 1 if isinstance(raw, str) else len(raw)
    return n if len(traj.messages) >= n else 0


def to_nemo_gym_run_response(traj: Trajectory) -> dict[str, Any]:
    """The NeMo Gym `/run` response for one trajectory: the row's responses_create_params, a
    Responses `response` whose output items carry prompt_token_ids / generation_token_ids /
    generation_log_probs (on the last item of each model call, one carrier per call, as NeMo RL's
    contiguity check expects), and `reward` (null for failed episodes, with `error`)."""
    row = traj.task.row
    items = [dict(m) for m in traj.messages[_input_len(traj) :]]
    # A failed episode carries no token data: nothing of it may be trained on.
    turns = traj.turns if traj.ok else []
    groups = _model_call_groups(items) if turns else []
    if len(groups) != len(turns):
        raise ProtocolError(
            f"the transcript holds {len(groups)} model calls but the trajectory has {len(turns)} turns",
            component="trainer",
            field="messages",
        )
    segments(turns)  # fail here, naming the turn, rather than in the trainer
    for group, turn in zip(groups, turns, strict=True):
        carrier = items[group[-1]]
        carrier["prompt_token_ids"] = list(turn.prompt_token_ids)
        carrier["generation_token_ids"] = list(turn.generation_token_ids)
        carrier["generation_log_probs"] = list(turn.generation_log_probs)
    params = dict(row.get("responses_create_params", {}))
    response = {
        "id": f"resp_{traj.trajectory_id}",
        "object": "response",
        "created_at": int(time.time()),
        "model": traj.policy.model,
        "output": items,
        "parallel_tool_calls": params.get("parallel_tool_calls", True),
        "tool_choice": params.get("tool_choice", "auto"),
        "tools": params.get("tools", []),
        "status": "completed" if traj.ok else "failed",
    }
    env_fields = {k: v for k, v in row.items() if k not in ("responses_create_params",)}
    out: dict[str, Any] = {**env_fields, "responses_create_params": params, "response": response, "reward": traj.reward}
    if traj.reward_components:
        out["reward_components"] = dict(traj.reward_components)
    out["rollgate"] = {
        "trajectory_id": traj.trajectory_id,
        "outcome": traj.outcome.value,
        "error": traj.error.model_dump(mode="json") if traj.error else None,
    }
    return out
