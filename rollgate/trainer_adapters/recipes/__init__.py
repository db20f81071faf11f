"""Learning recipes (`rollgate train --recipe NAME --out DIR`): a whole run through Rollgate's own
parts: tasks from an environment's generator, gold demonstrations collected by the agent loop and
exported with `rollgate export --format sft`, supervised fine-tuning, then GRPO (TRL's
GRPOTrainer, rollouts from the in-process stack), with held-out evaluation before and after each
phase. Held-out measurement is injected (an `Evaluator`): this layer sits below rollgate.evaluation."""

from __future__ import annotations

from dataclasses import replace

from rollgate.core.errors import BadRequest
from rollgate.model_server.tiny import TinyShape
from rollgate.trainer_adapters.recipes.config import (
    AgentBudget,
    EvalPlan,
    GRPOPhase,
    RecipeConfig,
    SFTPhase,
)

__all__ = ["RECIPES", "RecipeConfig", "SFTPhase", "GRPOPhase", "EvalPlan", "AgentBudget", "get_recipe"]

RECIPES: dict[str, RecipeConfig] = {
    "tiny-math": RecipeConfig(
        name="tiny-math",
        env="math",
        description="the math environment (calculator tool): SFT on gold tool calls, then GRPO on the verified reward",
        seed=0,
        train_tasks=2000,
        heldout_tasks=105,  # 15 per problem category (the generator rotates through 7)
        # 2.6M parameters: unlike hidden 128 / 4 heads (1.23M), it learns in SFT to read the box size
        # and the discount from the question, so its sampled policy has more to gain from GRPO.
        shape=TinyShape(
            hidden_size=192, intermediate_size=768, num_hidden_layers=4, num_attention_heads=6, num_key_value_heads=3
        ),
        # Copying numbers from the question into the calculator call, and from its output into the
        # answer, appears only after ~500 steps (an induction-style plateau before that): hence 1,000.
        # At lr 3e-3 this shape had not begun copying by step 1,000. Held-out points from step 500
        # (at 250 the curve sits at ~0.005): each costs 40-60 s of the 20-minute budget on a slow
        # 2-core machine.
        sft=SFTPhase(epochs=8.0, batch_size=16, learning_rate=1e-3, warmup_steps=20, eval_every=250, eval_from=500),
        # GRPO updates the final norm's scales only: the one direction the policy-gradient estimate of
        # a 64-episode step agrees on from batch to batch (benchmarks/bench_grpo_snr.py).
        grpo=GRPOPhase(
            steps=20, prompts_per_step=8, num_generations=8, learning_rate=5e-2, eval_every=10, trainable="final_norm"
        ),
        # 4 samples a task: a checkpoint's mean reward at T = 1 with a quarter of the sampling variance of
        # one (each task and sample draws its own seed: rollgate.core.rows.derive_seed)
        # greedy_reference: what sharpening alone could reach, measured on every run
        eval=EvalPlan(k=4, temperature=1.0, greedy_reference=True),
        agent=AgentBudget(max_turns=4, max_output_tokens=256, max_output_tokens_per_call=96),
        targets={"reward_before_about": 0.0, "reward_after_sft_min": 0.4, "rl_gain_min": 0.1, "seconds_max": 1200},
    ),
    # the checkpoint `rollgate demo` serves by default: tiny-math's data and SFT on the embedded tiny shape
    # (0.22M parameters, about a quarter of tiny-math's cost a step). Copying appears after ~8,000
    # demonstrations whatever the shape; held-out reward follows by ~16,000-24,000, hence 1,500
    # steps of 16 (greedy 0.30 on 50 held-out tasks; 1,000 steps gave 0.18). Measured greedy, as the
    # demo samples it. Its GRPO phase is a token one: the demo serves the SFT checkpoint. A warm-up
    # of 200 steps, not 20: with 20, whether the copying appeared by the end of the run depended on
    # the machine's float rounding (greedy 0.03-0.63 over 16 slightly perturbed starts, 7 of them
    # at least 0.25); with 200, 0.30-0.60, all 16 (benchmarks/bench_demo_sft.py).
    "tiny-math-demo": RecipeConfig(
        name="tiny-math-demo",
        env="math",
        description="tiny-math shortened for `rollgate demo --trained`: SFT of the embedded tiny shape",
        seed=0,
        train_tasks=2000,
        heldout_tasks=105,
        shape=TinyShape(),
        sft=SFTPhase(epochs=12.0, batch_size=16, learning_rate=5e-3, warmup_steps=200, eval_every=250),
        grpo=GRPOPhase(steps=5, prompts_per_step=8, num_generations=8, learning_rate=1e-4, eval_every=5),
        eval=EvalPlan(k=1, temperature=0.0),
        agent=AgentBudget(max_turns=4, max_output_tokens=256, max_output_tokens_per_call=96),
    ),
    # A real pretrained model (SmolLM2-135M-Instruct, `rollgate model get smollm2-135m-instruct`) on
    # the math environment with its calculator tool: multi-turn episodes in the Hermes tool format
    # the model server writes into the prompt of a template without tool support.
    "smollm2-math": RecipeConfig(
        name="smollm2-math",
        env="math",
        description="SmolLM2-135M-Instruct on the math environment (calculator tool): SFT of its top layers "
        "on gold tool calls, then GRPO on the verified reward",
        model="smollm2-135m-instruct",
        seed=0,
        train_tasks=800,
        heldout_tasks=200,
        # 20 steps of 16 (two fifths of the demonstrations): a step runs the shared system prompt
        # (with the tool listing, ~330 tokens) once and the 16 episodes' own ~130 tokens after it,
        # through all 30 layers forward and the top 10 backward. Not more: what GRPO can teach
        # greedy decoding is the tasks the SFT policy decodes wrongly but sometimes samples right.
        # After 25 steps greedy failed only where no sample succeeds (fractions, algebra) plus ~5
        # tasks, and GRPO's greedy gain was +0.005; after 20, percent problems are still 0.20
        # greedy and GRPO takes them to 0.60-0.87 (+0.050, +0.030, +0.005, +0.055 and +0.050 greedy
        # overall in five runs: other kinds lose some, docs/trainers/recipes.md).
        # After 50 steps the policy sampled what it decoded greedily, leaving nothing to learn.
        sft=SFTPhase(epochs=0.4, batch_size=16, learning_rate=5e-4, warmup_steps=5, trainable="top:10"),
        # sampled at 1.0 in training and evaluation, as tiny-math: the sampled policy's distance to
        # its greedy one is what GRPO can gain by sharpening (after 30 SFT steps: 0.65 at 1.0, 0.69
        # at 0.7, 0.72 greedy). A first SFT of 15 steps sampled mostly malformed tool calls at 1.0.
        # GRPO trains the top 2 decoder layers at 5e-5 and the final norm's scales at 2e-2: the
        # norm's one reliable direction (the sampling temperature) takes large steps, the layers'
        # directions, which batches agree on less (benchmarks/bench_grpo_snr.py: cosine 0.18 between
        # 64-episode batches), small ones. Screening first (128 training tasks x 4 samples) keeps
        # the tasks the post-SFT policy sometimes solves and sometimes fails (47-55 of 128): 7 of 12
        # groups a step had no contrast without it, 2 to 4 with it. 14 steps of 12 prompts x 8
        # (the loss scores only completion tokens: prefix_logps.token_logps).
        grpo=GRPOPhase(
            steps=14,
            prompts_per_step=12,
            num_generations=8,
            learning_rate=5e-5,
            norm_learning_rate=2e-2,
            screen_tasks=128,
            screen_samples=4,
            temperature=1.0,
            eval_every=0,  # measured at the end only: each 200-task point costs 2-3 minutes of the 45
            trainable="top:2",
            max_completion_length=192,
        ),
        eval=EvalPlan(k=1, temperature=1.0, greedy_reference=True),
        agent=AgentBudget(
            max_turns=4,
            max_output_tokens=256,
            max_output_tokens_per_call=64,
            model_timeout_s=900.0,
            episode_timeout_s=1800.0,
        ),
        targets={"final_gain_over_before_min": 0.5, "rl_gain_min": 0.05, "seconds_max": 2700},
    ),
}


# smollm2-math at a GPU's budget (`rollgate train --recipe smollm2-math-gpu`, a CUDA GPU and unsloth):
# the same tasks, SFT and held-out plan, SFT and every evaluation on the GPU, and a GRPO phase
# through Unsloth with 128 episodes a step and 32 steps (3 times the CPU recipe's episodes).
RECIPES["smollm2-math-gpu"] = replace(
    RECIPES["smollm2-math"],
    name="smollm2-math-gpu",
    description="smollm2-math on a CUDA GPU: GRPO through Unsloth, 16 prompts x 8 samples a step, 32 steps",
    grpo=replace(RECIPES["smollm2-math"].grpo, steps=32, prompts_per_step=16, eval_every=16, backend="unsloth"),
    device="cuda",
    targets={"final_gain_over_before_min": 0.5, "rl_gain_min": 0.05},
)


def get_recipe(name: str) -> RecipeConfig:
    try:
        return RECIPES[name]
    except KeyError:
        raise BadRequest(
            f"unknown recipe {name!r}; known: {', '.join(sorted(RECIPES))}", component="train", field="--recipe"
        ) from None
