"""NeMo RL adapter held to hand-written golden fixtures (the nemo-rl package on the index is a
placeholder, so NeMo RL itself cannot run here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rollgate.core.errors import ProtocolError
from rollgate.core.schemas import Outcome
from rollgate.trainer_adapters.nemo_rl import (
    ContiguityError,
    to_message_log,
    to_nemo_gym_run_response,
    to_rollout_batch,
    to_rollout_result,
)
from tests.trainer_adapters import builders

FIXTURES = Path(__file__).parent / "fixtures"


def golden(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def test_rollout_result_matches_golden_message_log_shape_and_dtypes():
    want = golden("nemo_rl_rollout_result.json")
    got = to_rollout_result(builders.trajectory())
    assert len(got["message_log"]) == len(want["message_log"])
    for g, w in zip(got["message_log"], want["message_log"], strict=True):
        assert g["role"] == w["role"]
        assert g["token_ids"].dtype == torch.long and str(g["token_ids"].dtype) == "torch." + w["dtype"]
        assert g["token_ids"].tolist() == w["token_ids"]
        if w["role"] == "assistant":
            assert g["generation_logprobs"].dtype == torch.float32
            assert g["generation_logprobs"].tolist() == pytest.approx(w["generation_logprobs"])
            assert g["generation_logprobs"].shape == g["token_ids"].shape
        else:
            assert "generation_logprobs" not in g
    for key in (
        "total_reward",
        "reward/correct",
        "reward/format",
        "loss_multiplier",
        "length",
        "truncated",
        "task_name",
    ):
        assert got[key] == want[key], key
    assert got["reward/correct"] + got["reward/format"] == pytest.approx(got["total_reward"])
    assert got["input_message_log"][0]["token_ids"].tolist() == builders.PROMPT


def test_concatenated_message_log_reproduces_the_last_prompt_plus_generation():
    traj = builders.trajectory()
    flat = torch.cat([m["token_ids"] for m in to_message_log(traj)]).tolist()
    last = traj.turns[-1]
    assert flat == last.prompt_token_ids + last.generation_token_ids


def test_non_contiguous_turn_is_detected_and_named():
    turns = builders.three_turns()
    turns[1] = turns[1].model_copy(update={"prompt_token_ids": [999] + turns[1].prompt_token_ids[1:]})
    with pytest.raises(ContiguityError) as info:
        to_message_log(builders.trajectory(turns=turns))
    assert info.value.turn == 1 and "turn 1" in info.value.message


@pytest.mark.parametrize("outcome", [Outcome.env_error, Outcome.model_error, Outcome.timeout, Outcome.cancelled])
def test_failed_outcomes_are_masked_and_never_rewarded(outcome):
    got = to_rollout_result(builders.trajectory(outcome, turns=[]))
    assert got["loss_multiplier"] == 0.0
    assert not any(k.startswith("reward/") for k in got)
    assert [m["role"] for m in got["message_log"]] == ["user", "assistant"]
    assert got["extra_env_info"]["outcome"] == outcome.value


def test_failed_episode_takes_its_group_mean_so_the_baseline_is_unbiased():
    trajs = [
        builders.trajectory(reward=1.0, index=0),
        builders.trajectory(reward=0.0, index=1),
        builders.trajectory(Outcome.timeout, index=2),
        builders.trajectory(Outcome.env_error, group="g2", index=0),
    ]
    out = to_rollout_batch(trajs)
    assert [r["loss_multiplier"] for r in out] == [1.0, 1.0, 0.0, 0.0]
    assert out[2]["total_reward"] == pytest.approx(0.5)
    assert out[3]["total_reward"] == 0.0  # no successful sibling: a masked placeholder


def test_nemo_gym_run_response_matches_golden():
    want = golden("nemo_gym_run_response.json")
    got = to_nemo_gym_run_response(builders.trajectory())
    for key in ("expected_answer", "env", "task_id", "reward", "reward_components"):
        assert got[key] == want[key], key
    assert got["responses_create_params"] == builders.ROW["responses_create_params"]
    for key in ("object", "model", "status"):
        assert got["response"][key] == want["response"][key]
    assert got["response"]["output"] == want["response"]["output"]


def test_nemo_gym_output_passes_nemo_rls_contiguity_walk():
    """Re-walk the output the way NeMo RL's NeMo Gym post-processing does: every token-carrying
    item's prompt must start with all tokens seen so far."""
    seen: list[int] = []
    carriers = 0
    for item in to_nemo_gym_run_response(builders.trajectory())["response"]["output"]:
        if "generation_token_ids" not in item:
            continue
        carriers += 1
        assert item["prompt_token_ids"][: len(seen)] == seen
        seen = item["prompt_token_ids"] + item["generation_token_ids"]
    assert carriers == 3


def test_failed_run_response_has_null_reward_and_no_token_data():
    got = to_nemo_gym_run_response(builders.trajectory(Outcome.env_error))
    assert got["reward"] is None
    assert got["rollgate"]["error"]["component"] == "env"
    assert not any("generation_token_ids" in i for i in got["response"]["output"])


def test_transcript_that_disagrees_with_turns_is_a_protocol_error():
    short = builders.MESSAGES[:-1]  # the final assistant message (turn 3's output) is missing
    with pytest.raises(ProtocolError) as info:
        to_nemo_gym_run_response(builders.trajectory(messages=short))
    assert info.value.field == "messages"
