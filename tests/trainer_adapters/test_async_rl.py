"""Asynchronous GRPO (rollgate.trainer_adapters.async_rl): a real trl.GRPOTrainer on CPU whose
rollouts for step N+1 are collected while step N trains, by the real agent loop and the math
environment, served by a copy of the policy that receives the trainer's weights after each
optimizer step through the model server's weight-update path. Trajectories staler than the bound
are dropped (masked, no reward) and counted. No timing is asserted."""

from __future__ import annotations

import os

import pytest
import torch

from rollgate.core.schemas import Outcome
from rollgate.core.settings import AgentSettings
from rollgate.trainer_adapters.async_rl import StalenessStats, stale_positions, weight_push_callback
from rollgate.trainer_adapters.inprocess import InProcessRollgate
from rollgate.trainer_adapters.trl import RollgateRolloutFunc, rollgate_reward
from tests.trainer_adapters.builders import three_turns, trajectory
from tests.trainer_adapters.test_trl_grpo import math_rows


def versioned(*versions: str | None):
    turns = three_turns()
    for turn, v in zip(turns, versions, strict=True):
        turn.weight_version = v
    return turns


def test_stale_and_unversioned_trajectories_are_dropped_masked_and_counted():
    trajs = [
        trajectory(turns=versioned("step-5", "step-5", "step-5"), index=0),  # staleness 0
        trajectory(turns=versioned("step-4", "step-5", "step-5"), index=1),  # oldest turn counts: 1
        trajectory(turns=versioned("step-3", "step-4", "step-4"), index=2),  # 2 > 1: dropped
        trajectory(turns=versioned("step-5", None, "step-5"), index=3),  # unversioned: dropped
        trajectory(Outcome.env_error, index=4),  # failed: masked anyway, not counted as stale
    ]
    stats = StalenessStats(max_staleness=1)
    dropped = stale_positions(trajs, 5, 1, stats)
    assert dropped == {2, 3}
    assert (stats.dropped, stats.unversioned, stats.trajectories) == (2, 1, 4)
    assert stats.histogram == {0: 1, 1: 1, 2: 1}
    assert stats.per_step == [{"step": 5, "dropped": 2, "max_staleness_seen": 2}]
    out = RollgateRolloutFunc.to_trl(trajs, max_completion_length=None, filler_token_id=0, dropped=dropped)
    assert out["rollgate_reward"] == [1.0, 1.0, None, None, None]
    assert [any(m) for m in out["env_mask"]] == [True, True, False, False, False]
    assert stats.as_dict()["dropped_stale"] == 2


def run_async_grpo(tmp_path, model_dir, *, steps: int, push: bool, max_staleness: int = 1):
    """A real GRPOTrainer with the asynchronous rollout function; returns (func, served copy, model)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    rollgate = InProcessRollgate(
        model,
        tokenizer,
        ["math"],
        agent_settings=AgentSettings(max_turns=2, max_output_tokens=48, max_output_tokens_per_call=24),
        share_weights=False,
    )
    assert rollgate.model is not model  # generation serves a copy: training goes on beside it
    func = rollgate.rollout_func(math_rows(), sampling={"temperature": 1.0}, max_staleness=max_staleness)
    args = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        report_to=[],
        max_steps=steps,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=64,
        learning_rate=5e-2,  # large: the weights visibly move in a few steps
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
        gradient_checkpointing=False,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[rollgate_reward, lambda completion_ids, **_: [-len(c) / 100 for c in completion_ids]],
        args=args,
        train_dataset=func.tasks.dataset(),
        processing_class=tokenizer,
        rollout_func=func,
        callbacks=[weight_push_callback(rollgate, model)] if push else [],
    )
    try:
        trainer.train()
    finally:
        func.run_async(rollgate.aclose())
        func.close()
    return func, rollgate, model


def test_async_grpo_prefetches_the_next_step_and_pushes_each_steps_weights(tmp_path, tiny_model_dir):
    func, rollgate, model = run_async_grpo(tmp_path, tiny_model_dir, steps=3, push=True)
    s = func.stats
    # step 0 collected when asked; steps 1 and 2 were collected while the step before trained,
    # and TRL's sampler asked for exactly the prompts that were collected ahead
    assert (s.inline, s.prefetched, s.misses) == (1, 2, 0)
    assert s.dropped == 0 and set(s.histogram) <= {0, 1} and s.histogram.get(1, 0) > 0
    # after the last optimizer step the served copy holds the trainer's weights, stamped step-3
    assert rollgate.weight_version == "step-3"
    served = rollgate.model.state_dict()
    assert all(torch.equal(served[n], p) for n, p in model.state_dict().items())


def test_rollouts_staler_than_the_bound_are_dropped_and_counted(tmp_path, tiny_model_dir):
    # No weight pushes (as if they never reached the model server): the served policy stays
    # step-0, so by step 2 the prefetched rollouts are two versions old, over the bound of 1.
    func, rollgate, _ = run_async_grpo(tmp_path, tiny_model_dir, steps=3, push=False)
    s = func.stats
    assert rollgate.weight_version == "step-0"
    ok = [t for t in func.last_trajectories if t.ok]
    assert ok and func.last_dropped == {i for i, t in enumerate(func.last_trajectories) if t.ok}
    assert s.per_step[-1] == {"step": 2, "dropped": len(ok), "max_staleness_seen": 2}
    assert s.dropped == len(ok) and s.histogram[2] == len(ok)


def test_async_mode_needs_a_bound_of_at_least_one(tiny_model_dir):
    from rollgate.core.errors import BadRequest
    from rollgate.trainer_adapters.async_rl import AsyncRolloutFunc
    from rollgate.trainer_adapters.trl import TaskIndex

    with pytest.raises(BadRequest) as exc:
        AsyncRolloutFunc(None, TaskIndex(math_rows()), max_staleness=0)  # type: ignore[arg-type]
    assert exc.value.field == "max_staleness"
