"""TRL's GRPOTrainer with rollouts from Rollgate (`rollout_func`, TRL >= 1.0).

TRL calls `rollout_func(prompts, trainer)` with this process's slice of the generation batch: each
dataset prompt already repeated `num_generations` times in a row. It must return one completion per
entry: `prompt_ids`, `completion_ids`, `logprobs`, plus extra per-entry fields that TRL forwards to
the reward functions; `env_mask` is special: TRL uses it as the tool mask (1 = the model's tokens,
0 = tokens the environment spliced in, excluded from the loss).

Prompts map to task rows through a TaskIndex (a dataset prompt is the row's input as chat
messages). A failed episode is never trained as reward 0: its env_mask is all zeros and its reward
None, which TRL turns into NaN, leaves out of the group baseline and gives zero advantage.
A segmented trajectory (a black-box harness that rewrote its history: no one token sequence) is
refused with rollgate.core.tokens.SegmentedError, never flattened into a wrong sequence.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any

from rollgate.core import jsonutil
from rollgate.core.errors import BadRequest
from rollgate.core.schemas import TaskRow, Trajectory
from rollgate.core.tokens import trainable_sequence
from rollgate.trainer_adapters.rollouts import RolloutSource
from rollgate.trainer_adapters.sft import chat_messages

log = logging.getLogger(__name__)

__all__ = ["TaskIndex", "RollgateRolloutFunc", "make_rollout_func", "rollgate_reward", "reward_component"]


def _strip_none(value: Any) -> Any:
    # datasets (Arrow) gives every message dict the union of all keys, filling absent ones with None.
    if isinstance(value, dict):
        return {k: _strip_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_none(v) for v in value]
    return value


def prompt_key(prompt: Any) -> str:
    return jsonutil.dumps(_strip_none(prompt)).decode()


def prompt_messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A row's `input` as the chat-format prompt the TRL dataset carries."""
    raw = row["responses_create_params"]["input"]
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw
    return chat_messages(items)


class TaskIndex:
    """Task rows addressable by their TRL prompt. Two different rows with the same prompt would
    be ambiguous (TRL hands the rollout function prompts only), so they are refused up front."""

    def __init__(self, rows: Sequence[dict[str, Any]]):
        # The trainer's rows enter here: validated once; the rollout source takes the parsed rows.
        self._rows: dict[str, TaskRow] = {}
        self._prompts: list[list[dict[str, Any]]] = []
        for n, row in enumerate(rows):
            if not isinstance(row, dict):
                raise BadRequest(
                    f"rows[{n}]: a task row must be a JSON object", component="trainer", field=f"rows[{n}]"
                )
            try:
                task = TaskRow.model_validate(row)
            except ValueError as exc:
                raise BadRequest(f"task row {n} is invalid: {exc}", component="trainer", field=f"rows[{n}]") from None
            prompt = prompt_messages(task.row())
            key = prompt_key(prompt)
            if key in self._rows:
                if self._rows[key].row() != task.row():
                    raise BadRequest(
                        f"task rows {n} and an earlier one share a prompt but differ; TRL passes "
                        "only prompts to rollout_func, so make the prompts distinct",
                        component="trainer",
                        field=f"rows[{n}]",
                    )
                continue
            self._rows[key] = task
            self._prompts.append(prompt)

    def __len__(self) -> int:
        return len(self._prompts)

    def resolve(self, prompt: Any) -> TaskRow:
        row = self._rows.get(prompt_key(prompt))
        if row is None:
            raise BadRequest(
                "a prompt from the trainer matches no task row of this TaskIndex (is the "
                "train_dataset the one from .dataset()?)",
                component="trainer",
                field="prompt",
            )
        return row

    def resolve_key(self, key: str) -> TaskRow:
        """The row of a `prompt_key` (what rollgate.trainer_adapters.async_rl schedules by)."""
        return self._rows[key]

    def dataset(self):
        """A `datasets.Dataset` with the `prompt` column GRPOTrainer reads."""
        from datasets import Dataset

        return Dataset.from_dict(
            {
                "prompt": self._prompts,
                "task_id": [self._rows[prompt_key(p)].task_id or "" for p in self._prompts],
            }
        )


class _LoopThread:
    """One event loop for the adapter's lifetime: in-process servers (the local model backend's
    batching worker, session stores) bind to a loop, so every batch must run on the same one."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="rollgate-rollouts", daemon=True)
        self._thread.start()

    def run(self, coro, timeout_s: float | None):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)


class RollgateRolloutFunc:
    """The callable passed as `GRPOTrainer(rollout_func=...)`."""

    def __init__(
        self,
        source: RolloutSource,
        tasks: TaskIndex,
        *,
        sampling: dict[str, Any] | None = None,
        max_completion_length: int | None = None,
        on_policy_version: Callable[[str], None] | None = None,
        filler_token_id: int | None = None,
        timeout_s: float | None = 3600.0,
    ):
        self.source = source
        self.tasks = tasks
        self.sampling = dict(sampling or {})
        self.max_completion_length = max_completion_length
        self.on_policy_version = on_policy_version
        self.filler_token_id = filler_token_id
        self.timeout_s = timeout_s
        self._loop: _LoopThread | None = None
        self.batches = 0
        self.last_trajectories: list[Trajectory] = []

    def run_async(self, coro):
        """Run a coroutine on the adapter's loop (also how callers set up in-process parts)."""
        if self._loop is None:
            self._loop = _LoopThread()
        return self._loop.run(coro, self.timeout_s)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def _settings_from(self, trainer: Any) -> tuple[dict[str, Any], int | None, str | None, int]:
        args = getattr(trainer, "args", None)
        sampling = {"temperature": getattr(args, "temperature", None), "top_p": getattr(args, "top_p", None)}
        sampling = {k: v for k, v in sampling.items() if v is not None}
        sampling.update(self.sampling)
        max_len = self.max_completion_length or getattr(args, "max_completion_length", None)
        state = getattr(trainer, "state", None)
        version = f"step-{state.global_step}" if state is not None else None
        filler = self.filler_token_id
        if filler is None:
            tok = getattr(trainer, "processing_class", None)
            tok = getattr(tok, "tokenizer", tok)
            filler = getattr(tok, "pad_token_id", None)
            filler = getattr(tok, "eos_token_id", 0) if filler is None else filler
        return sampling, max_len, version, int(filler or 0)

    def __call__(self, prompts: list[Any], trainer: Any = None) -> dict[str, list[Any]]:
        sampling, max_len, version, filler = self._settings_from(trainer)
        if version is not None and self.on_policy_version is not None:
            self.on_policy_version(version)  # tag generations with the weights they came from
        rows, slots, order = self._plan(prompts)
        results = self.run_async(
            self.source.collect(rows, [len(s) for s in slots], sampling=sampling, policy_version=version)
        )
        trajs: list[Trajectory] = [None] * len(prompts)  # type: ignore[list-item]
        for row_slots, row_trajs in zip(slots, results, strict=True):
            for pos, traj in zip(row_slots, row_trajs, strict=True):
                trajs[pos] = traj
        self.batches += 1
        self.last_trajectories = trajs
        return self.to_trl(trajs, max_completion_length=max_len, filler_token_id=filler)

    def _plan(self, prompts: list[Any]) -> tuple[list[TaskRow], list[list[int]], list[str]]:
        """Distinct rows (in first-seen order) and, per row, the batch positions its samples fill."""
        index: dict[str, int] = {}
        rows: list[TaskRow] = []
        slots: list[list[int]] = []
        for pos, prompt in enumerate(prompts):
            key = prompt_key(prompt)
            if key not in index:
                index[key] = len(rows)
                rows.append(self.tasks.resolve(prompt))
                slots.append([])
            slots[index[key]].append(pos)
        return rows, slots, list(index)

    @staticmethod
    def to_trl(
        trajs: Sequence[Trajectory],
        *,
        max_completion_length: int | None,
        filler_token_id: int,
        dropped: Collection[int] = (),
    ) -> dict[str, list[Any]]:
        """TRL's rollout output. Failed episodes, and those at positions in `dropped` (too stale:
        rollgate.trainer_adapters.async_rl), are fully masked with no reward: never trained on."""
        out: dict[str, list[Any]] = {
            k: []
            for k in (
                "prompt_ids",
                "completion_ids",
                "logprobs",
                "env_mask",
                "rollgate_reward",
                "rollgate_reward_components",
                "rollgate_outcome",
                "rollgate_trajectory_id",
                "rollgate_turns",
                "rollgate_role",
            )
        }
        failed = 0
        for i, t in enumerate(trajs):
            seq = trainable_sequence(t, filler_token_id=filler_token_id, max_completion_tokens=max_completion_length)
            keep = t.ok and i not in dropped
            out["prompt_ids"].append(seq.prompt_ids)
            out["completion_ids"].append(seq.completion_ids)
            out["logprobs"].append(seq.logprobs)
            out["env_mask"].append(seq.env_mask if keep else [0] * len(seq.completion_ids))
            out["rollgate_reward"].append(t.reward if keep else None)
            out["rollgate_reward_components"].append(dict(t.reward_components or {}) if keep else None)
            out["rollgate_outcome"].append(t.outcome.value)
            out["rollgate_trajectory_id"].append(t.trajectory_id)
            out["rollgate_turns"].append(len(t.turns))
            out["rollgate_role"].append(t.role)  # a multi-role episode's trained role (None: single-role)
            failed += not t.ok
        if failed:
            log.warning("%d of %d episodes failed; they are masked out of this step", failed, len(trajs))
        return out


def make_rollout_func(rows: Sequence[dict[str, Any]], source: RolloutSource, **kwargs: Any) -> RollgateRolloutFunc:
    """The rollout function for `rows`; pass `func.tasks.dataset()` as GRPOTrainer's train_dataset."""
    return RollgateRolloutFunc(source, TaskIndex(rows), **kwargs)


def rollgate_reward(
    prompts: Any = None, completions: Any = None, rollgate_reward: Any = None, **_: Any
) -> list[float | None]:
    """The episode's verified reward (None for failed episodes: TRL skips them)."""
    if rollgate_reward is None:
        raise BadRequest(
            "rollgate_reward needs the rollout_func from rollgate.trainer_adapters.trl",
            component="trainer",
            field="rollgate_reward",
        )
    return list(rollgate_reward)


def reward_component(name: str) -> Callable[..., list[float | None]]:
    """A reward function for one named component (use these *instead of* rollgate_reward, with
    GRPOConfig.reward_weights, to weight components; both together would count the reward twice)."""

    def component(
        prompts: Any = None, completions: Any = None, rollgate_reward_components: Any = None, **_: Any
    ) -> list[float | None]:
        if rollgate_reward_components is None:
            raise BadRequest(
                "reward components need the Rollgate rollout_func",
                component="trainer",
                field="rollgate_reward_components",
            )
        return [None if c is None else float(c.get(name, 0.0)) for c in rollgate_reward_components]

    component.__name__ = f"rollgate_{name}"
    return component
