"""The TRL adapter's conversion and prompt->row mapping (pure parts; the real GRPOTrainer run is
in test_trl_grpo.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollgate.core.errors import BadRequest
from rollgate.core.schemas import Outcome
from rollgate.trainer_adapters.trl import RollgateRolloutFunc, TaskIndex, prompt_key, reward_component, rollgate_reward
from rollgate.trainer_adapters.unsloth import trl_version_problem
from tests.trainer_adapters import builders

GOLDEN = json.loads((Path(__file__).parent / "fixtures" / "trl_rollout_3turn.json").read_text())


def rows(n: int = 3) -> list[dict]:
    return [
        {
            "responses_create_params": {"input": f"What is {i}+{i}?"},
            "expected_answer": str(2 * i),
            "env": "math",
            "task_id": f"t{i}",
        }
        for i in range(n)
    ]


def test_three_turn_trajectory_becomes_aligned_trl_fields():
    out = RollgateRolloutFunc.to_trl([builders.trajectory()], max_completion_length=None, filler_token_id=0)
    for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask"):
        assert out[key][0] == GOLDEN[key], key
    assert len(out["logprobs"][0]) == len(out["completion_ids"][0]) == len(out["env_mask"][0])
    assert out["rollgate_reward"] == [1.0]
    assert out["rollgate_reward_components"] == [{"correct": 0.75, "format": 0.25}]


def test_max_completion_length_truncates_all_three_lists_consistently():
    out = RollgateRolloutFunc.to_trl([builders.trajectory()], max_completion_length=8, filler_token_id=0)
    assert out["completion_ids"][0] == GOLDEN["completion_ids"][:8]
    assert out["logprobs"][0] == GOLDEN["logprobs"][:8]
    assert out["env_mask"][0] == GOLDEN["env_mask"][:8]


def test_failed_episode_is_masked_with_no_reward_not_zero():
    trajs = [
        builders.trajectory(reward=0.0),
        builders.trajectory(Outcome.timeout),
        builders.trajectory(Outcome.env_error, turns=[]),
    ]
    out = RollgateRolloutFunc.to_trl(trajs, max_completion_length=None, filler_token_id=3)
    assert out["rollgate_reward"] == [0.0, None, None]
    assert set(out["env_mask"][1]) == {0} and out["env_mask"][2] == [0]
    assert out["completion_ids"][2] == [3] and out["prompt_ids"][2] == [3]
    assert rollgate_reward(rollgate_reward=out["rollgate_reward"]) == [0.0, None, None]
    correct = reward_component("correct")
    assert correct.__name__ == "rollgate_correct"
    assert correct(rollgate_reward_components=out["rollgate_reward_components"]) == [0.0, None, None]


def test_task_index_resolves_prompts_even_after_arrow_adds_none_keys():
    index = TaskIndex(rows())
    ds = index.dataset()
    assert len(ds) == 3 and ds[1]["task_id"] == "t1"
    prompt = [dict(m, tool_calls=None) for m in ds[1]["prompt"]]  # what a datasets round trip can add
    assert index.resolve(prompt).env_fields["expected_answer"] == "2"
    with pytest.raises(BadRequest) as info:
        index.resolve([{"role": "user", "content": "unknown"}])
    assert info.value.field == "prompt"


def test_same_prompt_with_different_rows_is_refused():
    a, b = rows(1)[0], dict(rows(1)[0], expected_answer="99")
    assert len(TaskIndex([a, dict(a)])) == 1  # exact duplicates are one task
    with pytest.raises(BadRequest) as info:
        TaskIndex([a, b])
    assert info.value.field == "rows[1]"


def test_invalid_row_is_named():
    with pytest.raises(BadRequest) as info:
        TaskIndex([rows(1)[0], {"responses_create_params": {}}])
    assert info.value.field == "rows[1]"


def test_plan_groups_repeated_prompts_and_keeps_batch_positions():
    index = TaskIndex(rows())
    func = RollgateRolloutFunc(source=None, tasks=index)  # type: ignore[arg-type]
    p = [x["prompt"] for x in index.dataset()]
    rows_, slots, _ = func._plan([p[0], p[0], p[2], p[2], p[0]])
    assert [r.task_id for r in rows_] == ["t0", "t2"]
    assert slots == [[0, 1, 4], [2, 3]]
    assert prompt_key(p[0]) != prompt_key(p[2])


def test_unsloth_trl_range_check():
    assert trl_version_problem("1.15.0") is None
    assert "outside the range" in trl_version_problem("1.16.0")
    assert "rollout_func" in trl_version_problem("0.21.0")


def test_unsloth_without_bitsandbytes_is_named_before_a_run(monkeypatch):
    import importlib.util

    from rollgate.trainer_adapters import unsloth

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a)
    )
    assert "pip install bitsandbytes" in unsloth.bitsandbytes_problem()
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "bitsandbytes" else real(name, *a)
    )
    assert unsloth.bitsandbytes_problem() is None


def test_unsloth_loads_the_policy_in_float32_as_the_trl_backend_trains(monkeypatch, tmp_path):
    """Unsloth's loader defaults to bfloat16 weights for full fine-tuning, whose steps of 5e-5
    round away on most of SmolLM2's weights (seen on an H200). Unsloth imports only with a CUDA
    GPU, so a stand-in module records what load_policy asks its loader for; the GPU tier loads
    through the real one."""
    import sys
    import types

    import torch

    from rollgate.trainer_adapters import unsloth

    asked = {}

    class FastLanguageModel:
        @staticmethod
        def from_pretrained(**kwargs):
            asked.update(kwargs)
            return "model", "tokenizer"

    monkeypatch.setitem(sys.modules, "unsloth", types.SimpleNamespace(FastLanguageModel=FastLanguageModel))
    assert unsloth.load_policy(tmp_path, max_seq_length=512) == ("model", "tokenizer")
    assert asked["dtype"] is torch.float32 and asked["full_finetuning"] is True
    assert asked["load_in_4bit"] is False and asked["model_name"] == str(tmp_path)
