"""Token layout shared by the trainer adapters: masks, log-prob alignment, truncation, contiguity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollgate.core.schemas import Outcome, Turn
from rollgate.core.tokens import ContiguityError, flatten, trainable_sequence
from tests.trainer_adapters import builders

GOLDEN = json.loads((Path(__file__).parent / "fixtures" / "trl_rollout_3turn.json").read_text())


def test_three_turn_tool_episode_masks_exactly_the_spliced_tokens():
    seq = flatten(builders.three_turns())
    assert seq.prompt_ids == GOLDEN["prompt_ids"]
    assert seq.completion_ids == GOLDEN["completion_ids"]
    assert seq.logprobs == GOLDEN["logprobs"]
    assert seq.env_mask == GOLDEN["env_mask"]
    assert len(seq.logprobs) == len(seq.completion_ids) == len(seq.env_mask)
    spliced = {t for s in builders.SPLICE for t in s}
    for tok, mask, lp in zip(seq.completion_ids, seq.env_mask, seq.logprobs, strict=False):
        assert mask == (0 if tok in spliced else 1)
        if mask == 0:
            assert lp == 0.0
    assert seq.model_token_count == sum(len(g) for g in builders.GEN)


def test_truncation_cuts_ids_logprobs_and_mask_together():
    seq = flatten(builders.three_turns()).truncated(5)
    assert seq.completion_ids == GOLDEN["completion_ids"][:5]
    assert seq.logprobs == GOLDEN["logprobs"][:5]
    assert seq.env_mask == GOLDEN["env_mask"][:5]
    assert seq.prompt_ids == GOLDEN["prompt_ids"]


def test_prompt_that_drops_history_is_reported_with_its_turn():
    turns = builders.three_turns()
    bad = turns[2].model_copy(
        update={"prompt_token_ids": turns[2].prompt_token_ids[:5] + [7] + turns[2].prompt_token_ids[6:]}
    )
    with pytest.raises(ContiguityError) as info:
        flatten([turns[0], turns[1], bad])
    assert info.value.turn == 2
    assert info.value.field == "turns[2].prompt_token_ids"
    assert "position 5" in info.value.message


def test_failed_episode_becomes_a_fully_masked_placeholder():
    traj = builders.trajectory(Outcome.env_error)
    seq = trainable_sequence(traj, filler_token_id=0)
    assert seq.completion_ids == GOLDEN["completion_ids"]
    assert set(seq.env_mask) == {0}
    empty = builders.trajectory(Outcome.model_error, turns=[])
    seq = trainable_sequence(empty, filler_token_id=5)
    assert (seq.prompt_ids, seq.completion_ids, seq.logprobs, seq.env_mask) == ([5], [5], [0.0], [0])


def test_single_turn_episode_has_no_masked_tokens():
    turn = Turn(prompt_token_ids=[1, 2], generation_token_ids=[3, 4], generation_log_probs=[-1.0, -2.0])
    seq = flatten([turn])
    assert (seq.prompt_ids, seq.completion_ids, seq.env_mask) == ([1, 2], [3, 4], [1, 1])
