"""Trajectories for NeMo RL: its rollout result (a `message_log` of token tensors) and the NeMo Gym
`/run` response shape that NeMo RL's existing NeMo Gym path already reads.

NeMo RL trains on assistant messages and treats every other message as context, so an episode
becomes alternating {"role": "user", "token_ids": <prompt tokens new since the previous call>} and
{"role": "assistant", "token_ids": <generated>, "generation_logprobs": <their log-probs>}.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from rollgate.agent_server.nemo_gym import to_nemo_gym_run_response
from rollgate.core.schemas import Outcome, Trajectory
from rollgate.core.tokens import ContiguityError, segments

log = logging.getLogger(__name__)

__all__ = ["ContiguityError", "to_message_log", "to_rollout_result", "to_rollout_batch", "to_nemo_gym_run_response"]


def to_message_log(traj: Trajectory) -> list[dict[str, Any]]:
    """The episode as NeMo RL's message_log (token_ids: torch.long, generation_logprobs: float32).
    Raises ContiguityError naming the first turn whose prompt does not extend the history."""
    log_: list[dict[str, Any]] = []
    for seg in segments(traj.turns):
        log_.append({"role": "user", "content": "", "token_ids": torch.tensor(seg.new_prompt_ids, dtype=torch.long)})
        log_.append(
            {
                "role": "assistant",
                "content": "",
                "token_ids": torch.tensor(seg.generation_ids, dtype=torch.long),
                "generation_logprobs": torch.tensor(seg.logprobs, dtype=torch.float32),
            }
        )
    return log_


def to_rollout_result(traj: Trajectory, *, pad_token_id: int = 0) -> dict[str, Any]:
    """One trajectory as a NeMo RL rollout result.

    A failed episode (error outcome) gets loss_multiplier 0.0 and a placeholder total_reward of 0.0
    that is never trained on; `to_rollout_batch` replaces the placeholder with its group's mean so
    it does not shift the group baseline either. `reward/<name>` components sum to total_reward.
    """
    ok = traj.ok
    if ok:
        message_log = to_message_log(traj)
    else:
        try:
            message_log = to_message_log(traj) if traj.turns else []
        except ContiguityError:
            message_log = []  # nothing of a failed episode is trained on
        if not message_log:
            # NeMo RL batches need at least one user and one assistant message per sample.
            message_log = [
                {"role": "user", "content": "", "token_ids": torch.tensor([pad_token_id], dtype=torch.long)},
                {
                    "role": "assistant",
                    "content": "",
                    "token_ids": torch.tensor([pad_token_id], dtype=torch.long),
                    "generation_logprobs": torch.zeros(1, dtype=torch.float32),
                },
            ]
    reward = float(traj.reward) if ok and traj.reward is not None else 0.0
    result: dict[str, Any] = {
        "message_log": message_log,
        "input_message_log": message_log[:1],
        "total_reward": reward,
        "loss_multiplier": 1.0 if ok else 0.0,
        "length": sum(int(m["token_ids"].numel()) for m in message_log),
        "truncated": traj.outcome is Outcome.truncated,
        "task_name": traj.task.env,
        "extra_env_info": {
            "trajectory_id": traj.trajectory_id,
            "group_id": traj.group_id,
            "sample_index": traj.sample_index,
            "role": traj.role,  # multi-role episodes: whose trajectory (None on single-role ones)
            "episode_id": traj.episode_id,
            "task_id": traj.task.task_id,
            "outcome": traj.outcome.value,
            "metrics": dict(traj.metrics),
            "error": traj.error.model_dump(mode="json") if traj.error else None,
            "weight_versions": [t.weight_version for t in traj.turns],
        },
    }
    if ok and traj.reward_components:
        for name, value in traj.reward_components.items():
            result[f"reward/{name}"] = float(value)
    return result


def to_rollout_batch(trajs: Sequence[Trajectory], *, pad_token_id: int = 0) -> list[dict[str, Any]]:
    """Convert a batch; a failed episode's placeholder reward becomes the mean reward of the
    successful episodes of its group (GRPO baselines average over the whole group: a fake 0 would
    bias every sibling's advantage). With no successful sibling it stays 0.0, masked anyway.
    A multi-role group is one role's samples of a row, (group_id, role): in a zero-sum game the
    roles' rewards of one row average to 0, never a baseline for either role."""
    results = [to_rollout_result(t, pad_token_id=pad_token_id) for t in trajs]
    ok_rewards: dict[tuple[str, str | None], list[float]] = {}
    for t in trajs:
        if t.ok and t.reward is not None:
            ok_rewards.setdefault((t.group_id, t.role), []).append(float(t.reward))
    for t, r in zip(trajs, results, strict=True):
        group = ok_rewards.get((t.group_id, t.role))
        if not t.ok and group:
            r["total_reward"] = sum(group) / len(group)
    return results


# NeMo Gym /run -----------------------------------------------------------------------------------
