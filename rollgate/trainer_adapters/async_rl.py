"""Asynchronous GRPO through Rollgate: the rollouts of step N+1 are collected while step N trains,
on TRL's standard GRPOTrainer with Rollgate's rollout function.

TRL's own `trl.experimental.async_grpo.AsyncGRPOTrainer` cannot run here: it forces its packed
"tree" attention, whose kernel (`kernels.get_kernel(".../flash-attn3")`) is fetched from the Hub at
run time and needs CUDA. So the overlap is Rollgate's: after TRL asks for step N's batch, the
rollout function starts collecting the batches of steps N+1 .. N+K in the background (K =
`max_staleness`), on the policy served then. TRL's sampler decides which prompts a step gets; the
function reads the same sampler to know them ahead, and checks: a prefetched batch whose prompts
are not the ones TRL hands over is thrown away and the step collected there and then (counted as
a miss), so the data always match the prompts.

Versions: the policy after N optimizer steps is "step-N"; every turn records the weight_version
that generated it. After each optimizer step the trainer pushes its weights (`WeightPusher`: into
the in-process model server, or to the gateway's POST /v1/weights, which reaches every replica),
so later turns carry the new version. A trajectory's staleness at step N is N minus its oldest
turn's version. Those staler than K (or with no "step-N" version to judge by) are dropped from
the batch (fully masked, no reward: never trained on) and counted in `stats`."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rollgate.core.errors import BadRequest
from rollgate.core.schemas import Trajectory
from rollgate.trainer_adapters.rollouts import RolloutSource
from rollgate.trainer_adapters.trl import RollgateRolloutFunc, TaskIndex, prompt_key

log = logging.getLogger(__name__)

_STEP = re.compile(r"^step-(\d+)$")


def version_step(version: str | None) -> int | None:
    """ "step-12" -> 12; anything else -> None."""
    m = _STEP.match(version or "")
    return int(m.group(1)) if m else None


def oldest_step(traj: Trajectory) -> int | None:
    """The oldest policy that produced any turn of `traj` (None: a turn has no step version)."""
    steps = [version_step(t.weight_version) for t in traj.turns]
    if not steps or any(s is None for s in steps):
        return None
    return min(steps)  # type: ignore[type-var]


@dataclass
class StalenessStats:
    """What the asynchronous rollout function did, for logs and the recipe's metrics.json."""

    max_staleness: int
    trajectories: int = 0
    dropped: int = 0  # older than the bound, or unversioned: masked out, never trained on
    unversioned: int = 0  # of `dropped`: no "step-N" weight_version to judge by
    histogram: dict[int, int] = field(default_factory=dict)  # staleness -> trajectories
    prefetched: int = 0  # batches served from a background collection
    inline: int = 0  # batches collected when asked (the first, or after a miss)
    misses: int = 0  # prefetched batches whose prompts were not the step's
    per_step: list[dict[str, int]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_staleness": self.max_staleness,
            "trajectories": self.trajectories,
            "dropped_stale": self.dropped,
            "unversioned": self.unversioned,
            "staleness_histogram": {str(k): v for k, v in sorted(self.histogram.items())},
            "batches_prefetched": self.prefetched,
            "batches_inline": self.inline,
            "prefetch_misses": self.misses,
            "per_step": self.per_step,
        }


def stale_positions(trajs: Sequence[Trajectory], step: int, max_staleness: int, stats: StalenessStats) -> set[int]:
    """Positions of the trajectories to drop at optimizer step `step`; counts them in `stats`.
    Failed episodes are masked anyway and not counted here."""
    out: set[int] = set()
    worst = 0
    for i, t in enumerate(trajs):
        if not t.ok:
            continue
        stats.trajectories += 1
        oldest = oldest_step(t)
        if oldest is None:
            stats.unversioned += 1
            out.add(i)
            continue
        staleness = step - oldest
        worst = max(worst, staleness)
        stats.histogram[staleness] = stats.histogram.get(staleness, 0) + 1
        if staleness > max_staleness:
            out.add(i)
    stats.dropped += len(out)
    stats.per_step.append({"step": step, "dropped": len(out), "max_staleness_seen": worst})
    if out:
        log.warning(
            "step %d: dropped %d of %d trajectories older than %d policy versions (or unversioned)",
            step,
            len(out),
            len(trajs),
            max_staleness,
        )
    return out


class WeightPusher(Protocol):
    def push(self, model: Any, version: str) -> None:
        """Make the served policy `model`'s current weights, stamped `version`."""
        ...


@dataclass
class _Ahead:
    keys: list[str]
    task: asyncio.Task  # on the adapter's loop


class AsyncRolloutFunc(RollgateRolloutFunc):
    """`GRPOTrainer(rollout_func=...)` that collects up to `max_staleness` steps ahead."""

    def __init__(self, source: RolloutSource, tasks: TaskIndex, *, max_staleness: int = 1, **kwargs: Any):
        if max_staleness < 1:
            raise BadRequest(
                f"max_staleness must be >= 1 in asynchronous mode, got {max_staleness}",
                component="trainer",
                field="max_staleness",
            )
        kwargs.pop("on_policy_version", None)  # versions come from the weight pushes
        super().__init__(source, tasks, **kwargs)
        self.max_staleness = max_staleness
        self.stats = StalenessStats(max_staleness)
        self._calls = 0
        self._ahead: dict[int, _Ahead] = {}
        self._schedule: list[str] = []  # prompt keys of the trainer's sampler, in order
        self._sampler: Any = None
        self._indices: Any = None
        self._dataset: Any = None
        self._unpredictable = False
        self.last_dropped: set[int] = set()

    def __call__(self, prompts: list[Any], trainer: Any = None) -> dict[str, list[Any]]:
        sampling, max_len, version, filler = self._settings_from(trainer)
        step = int(getattr(getattr(trainer, "state", None), "global_step", self._calls))
        call = self._calls
        self._calls += 1
        rows, slots, keys = self._plan(prompts)
        counts = [len(s) for s in slots]
        ahead = self._ahead.pop(call, None)
        if ahead is not None and ahead.keys == keys:
            results = self.run_async(_wait(ahead.task))
            self.stats.prefetched += 1
        else:
            if ahead is not None:
                self.run_async(_cancel([ahead.task]))
                self.stats.misses += 1
                log.warning("step %d: the prefetched batch was for other prompts; collecting this one now", step)
            results = self.run_async(self.source.collect(rows, counts, sampling=sampling, policy_version=version))
            self.stats.inline += 1
        self._prefetch(trainer, call, len(prompts), sampling, version)
        trajs: list[Trajectory] = [None] * len(prompts)  # type: ignore[list-item]
        for row_slots, row_trajs in zip(slots, results, strict=True):
            for pos, traj in zip(row_slots, row_trajs, strict=True):
                trajs[pos] = traj
        dropped = stale_positions(trajs, step, self.max_staleness, self.stats)
        self.batches += 1
        self.last_trajectories = trajs
        self.last_dropped = dropped
        return self.to_trl(trajs, max_completion_length=max_len, filler_token_id=filler, dropped=dropped)

    # --- looking ahead -----------------------------------------------------------------------

    def _prefetch(self, trainer: Any, call: int, size: int, sampling: dict[str, Any], version: str | None) -> None:
        """Start the batches of the next `max_staleness` calls that are not running yet."""
        for nxt in range(call + 1, call + 1 + self.max_staleness):
            if nxt in self._ahead:
                continue
            keys = self._predict(trainer, nxt, size)
            if keys is None:
                return
            try:
                rows = [self.tasks.resolve_key(k) for k in dict.fromkeys(keys)]
            except KeyError:  # the trainer's dataset is not this TaskIndex's: no forecast
                self._unpredictable = True
                log.warning("the trainer's dataset holds prompts of no task row; batches are collected when asked")
                return
            repeats = [keys.count(k) for k in dict.fromkeys(keys)]
            coro = self.source.collect(rows, repeats, sampling=sampling, policy_version=version)
            self._ahead[nxt] = _Ahead(list(dict.fromkeys(keys)), self.run_async(_spawn(coro)))

    def _predict(self, trainer: Any, call: int, size: int) -> list[str] | None:
        """The prompt keys (one per sample, in order) TRL will pass on call number `call`: read
        from a fresh copy of the trainer's own sampler (same seed, so the same order)."""
        if self._unpredictable:
            return None
        try:
            if self._sampler is None:
                self._dataset = trainer.train_dataset
                self._sampler = trainer._get_train_sampler(self._dataset)
                self._indices = iter(self._sampler)
            fresh = False
            while len(self._schedule) < (call + 1) * size:
                index = next(self._indices, None)
                if index is None:  # the next epoch: the same sampler goes on (its generator too)
                    if fresh:
                        raise ValueError("the sampler yields nothing (fewer prompts than a batch?)")
                    self._indices, fresh = iter(self._sampler), True
                    continue
                fresh = False
                self._schedule.append(prompt_key(self._dataset[index]["prompt"]))
        except Exception as exc:  # noqa: BLE001 - without a forecast the steps are collected inline
            self._unpredictable = True
            log.warning("cannot read the trainer's sampler (%s); every batch will be collected when asked", exc)
            return None
        return self._schedule[call * size : (call + 1) * size]

    def close(self) -> None:
        """Cancel the batches collected ahead (their episodes end as cancelled, their sessions
        closed) on the loop that runs them, then stop it."""
        if self._ahead and self._loop is not None:
            self.run_async(_cancel([a.task for a in self._ahead.values()]))
        self._ahead.clear()
        super().close()


async def _spawn(coro) -> asyncio.Task:
    return asyncio.ensure_future(coro)


async def _wait(task: asyncio.Task) -> Any:
    return await task


async def _cancel(tasks: list[asyncio.Task]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def weight_push_callback(pusher: WeightPusher, model: Any):
    """A transformers TrainerCallback: after each optimizer step, push `model` as "step-N"."""
    from transformers import TrainerCallback

    class PushWeights(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            pusher.push(model, f"step-{state.global_step}")

    return PushWeights()
