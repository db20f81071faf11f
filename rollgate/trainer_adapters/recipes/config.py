"""What a learning recipe is: its environment, tasks, model shape, and the settings of each
phase (SFT on gold demonstrations, GRPO on verified reward, held-out evaluation). Plain frozen
dataclasses: a recipe is data, and a shortened copy (for tests) is `dataclasses.replace`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rollgate.model_server.tiny import TinyShape
from rollgate.trainer_adapters.recipes.trainable import check_trainable


@dataclass(frozen=True)
class SFTPhase:
    epochs: float = 1.0  # passes over the gold demonstrations (fractions allowed)
    batch_size: int = 16
    learning_rate: float = 3e-3
    warmup_steps: int = 20
    eval_every: int = 0  # held-out evaluation every N SFT steps (0: only at the end of the phase)
    eval_from: int = 0  # ... from this SFT step on (the end of the phase is always measured)
    # which weights SFT updates: "all", "norms", "final_norm" or "top:N" (recipes/trainable.py)
    trainable: str = "all"

    def __post_init__(self) -> None:
        check_trainable(self.trainable, "SFTPhase.trainable")


GENERATIONS = ("local", "vllm")


@dataclass(frozen=True)
class GRPOPhase:
    steps: int = 20
    prompts_per_step: int = 8
    num_generations: int = 8  # samples per prompt: the group GRPO's baseline is computed over
    learning_rate: float = 2e-4
    # Only this top fraction of completion tokens by entropy is trained (TRL's top_entropy_quantile,
    # after "Beyond the 80/20 rule"): the decisions, not the tokens every sample shares.
    top_entropy_quantile: float = 1.0
    num_iterations: int = 1  # optimizer steps per generated batch (TRL's mu; PPO-style clipping)
    beta: float = 0.0  # KL to the post-SFT policy (TRL's beta); 0: no reference model
    # Screening (0: off): sample `screen_samples` episodes of each of the first `screen_tasks`
    # training tasks with the post-SFT policy and train GRPO only on those it sometimes solves and
    # sometimes fails: a group that all pass or all fail has zero advantage and teaches nothing.
    screen_tasks: int = 0
    screen_samples: int = 4
    # ... and keep this share of each kind's all-solved tasks too (anchors, rounded up): no gradient
    # while every sample solves them, a negative one where a skill trained on another kind leaks in
    screen_keep_solved: float = 0.0
    temperature: float = 1.0
    max_completion_length: int = 160  # tokens of the whole multi-turn completion, env tokens included
    eval_every: int = 5  # held-out evaluation every N GRPO steps (and at the end)
    mode: str = "sync"  # "async": step N+1's rollouts are collected while step N trains
    max_staleness: int = 1  # async: rollouts at most this many policy versions old are trained on
    backend: str = "trl"  # "unsloth": Unsloth's patched GRPOTrainer on a CUDA GPU (trainer_adapters.unsloth)
    # Where the rollouts are generated: "local", the policy being trained served in process
    # (trainer_adapters.inprocess); "vllm", a vLLM server of the phase's own that reloads the
    # trainer's weights after every optimizer step (trainer_adapters.vllm_rollouts).
    generation: str = "local"
    # Which weights GRPO updates (recipes/trainable.py): "all"; "norms", only the normalization
    # layers' scales; "top:N", the last N decoder layers; or "final_norm", only the last norm's
    # (the scale of the hidden state the output layer reads: 192 numbers of tiny-math's 2.6M). At
    # a CPU budget's batch sizes the policy-gradient estimate is noise in almost every direction;
    # the final norm's scale is the one it agrees on from batch to batch
    # (benchmarks/bench_grpo_snr.py), and a full-parameter step follows the noise.
    # "final_norm_scale" trains that scale alone (a learned temperature: sharpening only).
    trainable: str = "all"
    # The final norm's scales at their own rate when `trainable` trains more than them (top:N, all;
    # None: the phase's rate). Their one direction batches agree on, the sampling temperature,
    # tolerates steps of ~1e-2 that would wreck a decoder layer's weights, whose directions need
    # ~1e-5 at a CPU budget's batch sizes (benchmarks/bench_grpo_snr.py).
    norm_learning_rate: float | None = None

    def __post_init__(self) -> None:
        check_trainable(self.trainable, "GRPOPhase.trainable")
        for name in ("learning_rate", "norm_learning_rate"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"GRPOPhase.{name} must be > 0, got {value}")
        if self.screen_tasks < 0 or self.screen_samples < 2:
            raise ValueError(
                f"GRPOPhase.screen_tasks must be >= 0 and screen_samples >= 2 (a task needs two samples to "
                f"disagree), got {self.screen_tasks} and {self.screen_samples}"
            )
        if not 0.0 <= self.screen_keep_solved <= 1.0:
            raise ValueError(f"GRPOPhase.screen_keep_solved must be in [0, 1], got {self.screen_keep_solved}")
        if self.generation not in GENERATIONS:
            raise ValueError(f"GRPOPhase.generation must be one of {', '.join(GENERATIONS)}, got {self.generation!r}")
        if self.trainable == "final_norm_scale" and (self.mode == "async" or self.generation != "local"):
            # a served copy takes the trainer's state dict (or checkpoint), which holds the scale apart
            raise ValueError("GRPOPhase.trainable 'final_norm_scale' trains in mode 'sync' with local generation only")


@dataclass(frozen=True)
class EvalPlan:
    k: int = 1  # samples per held-out task
    temperature: float = 1.0  # the policy as it is sampled in training
    threshold: float = 1.0  # a sample is correct when reward >= this
    # Also evaluate the post-SFT and the final checkpoints greedily (one sample a task, temperature
    # 0), beside the curve. The SFT policy's greedy reward is about the most that sharpening its
    # sampled policy can reach (the share of GRPO's gain that needs no new skill); the final
    # policy's, against it, says whether GRPO taught what greedy decoding got wrong. Off where
    # the evaluation is greedy already.
    greedy_reference: bool = False


@dataclass(frozen=True)
class AgentBudget:
    max_turns: int = 4
    max_output_tokens: int = 256
    max_output_tokens_per_call: int = 96
    # a model call's and an episode's time limits: a pretrained model's batch of long prompts on 2 CPU cores can
    # legitimately take minutes, where a hung server should still fail (AgentSettings.model_timeout_s)
    model_timeout_s: float = 120.0
    episode_timeout_s: float = 300.0


@dataclass(frozen=True)
class RecipeConfig:
    name: str
    env: str
    description: str
    seed: int = 0
    train_tasks: int = 1000  # from the environment's train split: gold demonstrations and GRPO prompts
    heldout_tasks: int = 100  # from its eval split: never trained on (disjoint by content hash)
    # The starting policy: None, a tiny model of `shape` built from scratch (held-out reward ~0);
    # or a pretrained model of the registry (`rollgate model list`), fetched once by `rollgate model get`
    model: str | None = None
    shape: TinyShape = field(default_factory=TinyShape)
    sft: SFTPhase = field(default_factory=SFTPhase)
    grpo: GRPOPhase = field(default_factory=GRPOPhase)
    eval: EvalPlan = field(default_factory=EvalPlan)
    agent: AgentBudget = field(default_factory=AgentBudget)
    # where SFT and GRPO train: "cpu", or "cuda" (a GPU recipe; the held-out evaluations' model server
    # takes the GPU whenever there is one). GRPO's backend "unsloth" implies "cuda".
    device: str = "cpu"
    # the bar the recipe was built to reach, reported beside its figures (never used to pass or
    # fail a run): held-out reward gains and the wall time on 2 quiet CPU cores
    targets: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"RecipeConfig.device must be 'cpu' or 'cuda', got {self.device!r}")

    @property
    def on_gpu(self) -> bool:
        return self.device == "cuda" or self.grpo.backend == "unsloth"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
