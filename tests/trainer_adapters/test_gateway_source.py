"""Rollouts for a trainer through a real gateway over loopback HTTP (the embedded app, role all).
The policy is the model server's `scripted` backend with the tiny model's tokenizer: real template,
real token ids, a deterministic tool call then an answer, so every episode is exactly two turns."""

from __future__ import annotations

import pytest

from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings
from rollgate.core.tokens import segments
from rollgate.trainer_adapters.rollouts import GatewayRollouts
from rollgate.trainer_adapters.trl import RollgateRolloutFunc, TaskIndex


def rows() -> list[dict]:
    return [
        {
            "responses_create_params": {"input": f"What is {a} + {a}?"},
            "expected_answer": str(2 * a),
            "env": "math",
            "task_id": f"dbl-{a}",
        }
        for a in (2, 5, 9)
    ]


@pytest.fixture
def gateway_url(tiny_model_dir):
    from rollgate.stack.embedded import build_app

    settings = Settings(envs=["math"], model={"backend": "scripted", "model_path": str(tiny_model_dir)})
    with serve_in_thread(build_app(settings)) as url:
        yield url


def test_gateway_rollouts_fill_every_batch_slot_with_its_own_row_and_sample(gateway_url):
    index = TaskIndex(rows())
    func = RollgateRolloutFunc(GatewayRollouts(gateway_url), index, max_completion_length=512)
    p = index.dataset()["prompt"]
    prompts = [p[2], p[0], p[2], p[0], p[1], p[2]]  # uneven repeats (3, 2, 1): one gateway job per count
    try:
        out = func(prompts, None)
    finally:
        func.close()
    trajs = func.last_trajectories
    assert [t.task.task_id for t in trajs] == ["dbl-9", "dbl-2", "dbl-9", "dbl-2", "dbl-5", "dbl-9"]
    assert [t.sample_index for t in trajs] == [0, 0, 1, 1, 0, 2]
    assert len({t.trajectory_id for t in trajs}) == 6
    for t, ids, lps, mask in zip(trajs, out["completion_ids"], out["logprobs"], out["env_mask"], strict=True):
        assert t.ok and len(t.turns) == 2, (t.outcome, t.error)
        assert len(ids) == len(lps) == len(mask)
        seg = segments(t.turns)
        # generation 1 (mask 1), the spliced tool output and next header (mask 0), generation 2 (mask 1)
        assert mask == [1] * len(seg[0].generation_ids) + [0] * len(seg[1].new_prompt_ids) + [1] * len(
            seg[1].generation_ids
        )
        assert out["prompt_ids"][trajs.index(t)] == t.turns[0].prompt_token_ids
    assert out["rollgate_reward"] == [t.reward for t in trajs]
