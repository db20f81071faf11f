"""GRPO with TRL on Rollgate rollouts, on a laptop CPU: the offline tiny model learns on the math
environment (calculator tool, multi-turn), served in process from the very weights being trained.

    pip install -e '.[train]'
    python examples/train_grpo_tiny.py --steps 4

Swap `InProcessRollgate` for `GatewayRollouts(url)` to take rollouts from a running gateway
(see docs/trainers/trl.md for keeping a remote policy in sync).
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile

from rollgate.core.settings import AgentSettings, Settings
from rollgate.model_server.tiny import ensure_tiny_model
from rollgate.resources_servers.envs.math_env import example_tasks
from rollgate.trainer_adapters.inprocess import InProcessRollgate
from rollgate.trainer_adapters.trl import rollgate_reward

log = logging.getLogger("train_grpo_tiny")


def brevity(completion_ids, **_):
    """A small format reward: the untrained tiny model is rarely correct, so this keeps a gradient."""
    return [-len(c) / 1000.0 for c in completion_ids]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--num-generations", type=int, default=4)
    parser.add_argument("--model", default=None, help="model directory (default: the offline tiny model)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    path = args.model or str(ensure_tiny_model(Settings().model.model_path))
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    rollgate = InProcessRollgate(
        model,
        tokenizer,
        ["math"],
        agent_settings=AgentSettings(max_turns=3, max_output_tokens=192, max_output_tokens_per_call=64),
    )
    rollout_func = rollgate.rollout_func(example_tasks(args.tasks, seed=0), sampling={"temperature": 0.7})
    with tempfile.TemporaryDirectory() as out_dir:
        config = GRPOConfig(
            output_dir=out_dir,
            use_cpu=True,
            bf16=False,
            fp16=False,
            report_to=[],
            max_steps=args.steps,
            per_device_train_batch_size=2 * args.num_generations,
            num_generations=args.num_generations,
            max_completion_length=192,
            learning_rate=1e-3,
            beta=0.0,
            logging_steps=1,
            save_strategy="no",
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[rollgate_reward, brevity],
            args=config,
            train_dataset=rollout_func.tasks.dataset(),
            processing_class=tokenizer,
            rollout_func=rollout_func,
        )
        try:
            trainer.train()
        finally:
            rollout_func.run_async(rollgate.aclose())
            rollout_func.close()
    turns = [len(t.turns) for t in rollout_func.last_trajectories]
    print(f"done: {trainer.state.global_step} steps; last batch turns per episode: {turns}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
