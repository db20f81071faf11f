"""The embedded Rollgate stack for a trainer: the trainer's own model served by the local backend,
the environments and the agent, all in this process.

Synchronous (`share_weights=True`): the policy that generates is the very model being trained
(weights shared, not copied); every rollout batch runs on the current weights and is stamped with
the trainer's step (`weight_version` "step-N" on each turn and `policy_version` on each
trajectory), so stale or mixed batches are visible in the data.

Asynchronous (`share_weights=False`): generation runs while the trainer trains, so it serves a
copy; after each optimizer step `push(model, "step-N")` loads the trainer's weights into it
through the model server's weight-update path (rollgate.model_server.weights: checked, then
copied in between two decode steps).

`ServedRollgate` is the part both share with a policy served elsewhere (vLLM:
rollgate.trainer_adapters.vllm_rollouts): the stack around a model service over a backend.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

from rollgate.core.schemas import Trajectory
from rollgate.core.settings import AgentSettings, Settings
from rollgate.trainer_adapters.rollouts import AgentRollouts
from rollgate.trainer_adapters.trl import RollgateRolloutFunc, TaskIndex

log = logging.getLogger(__name__)


class ServedRollgate:
    """A RolloutSource: Rollgate's embedded stack (environments, agent) around a model service over
    `backend`; subclasses say where the policy is served and how new weights reach it."""

    def __init__(
        self,
        backend: Any,
        envs: Sequence[str],
        *,
        agent_settings: AgentSettings | None = None,
        settings: Settings | None = None,
        served_name: str = "policy",
        concurrency: int = 64,
        roles: dict[str, Any] | None = None,
        train_role: str | None = None,
    ):
        from rollgate.model_server.service import ModelService
        from rollgate.stack import local_stack

        settings = settings if settings is not None else Settings()
        if agent_settings is not None:
            settings = settings.model_copy(update={"agent": agent_settings})
        self.backend = backend
        self.service = ModelService(backend, served_name=served_name, training_mode=True)
        # The one composition root: environments get their settings (e.g. the code sandbox's).
        self.stack = local_stack(settings, service=self.service, envs=envs)
        self.agent = self.stack.agent
        # with roles (docs/roles.md) the stack's agent set plays the episodes: the trained role is
        # this model, the others the policies `roles` gives them (models of `settings.role_models`)
        runner = self.stack.agents if roles is not None else self.agent
        self.rollouts = AgentRollouts(
            runner, concurrency=concurrency, roles=roles, train_role=train_role, registry=self.stack.registry
        )

    @property
    def weight_version(self) -> str | None:
        return self.backend.weight_version

    def set_policy_version(self, version: str) -> None:
        raise NotImplementedError

    async def collect(self, rows, repeats, *, sampling, policy_version) -> list[list[Trajectory]]:
        return await self.rollouts.collect(rows, repeats, sampling=sampling, policy_version=policy_version)

    async def aclose(self) -> None:
        await self.stack.aclose()

    def rollout_func(
        self, rows: Sequence[dict[str, Any]], *, max_staleness: int | None = None, **kwargs: Any
    ) -> RollgateRolloutFunc:
        """The GRPOTrainer rollout_func over `rows`; `func.tasks.dataset()` is the train_dataset.
        `max_staleness`: asynchronous (rollgate.trainer_adapters.async_rl; build this with
        share_weights=False and give the trainer `weight_push_callback(self, model)`)."""
        if max_staleness is None:
            return RollgateRolloutFunc(self, TaskIndex(rows), on_policy_version=self.set_policy_version, **kwargs)
        from rollgate.trainer_adapters.async_rl import AsyncRolloutFunc

        return AsyncRolloutFunc(self, TaskIndex(rows), max_staleness=max_staleness, **kwargs)


class InProcessRollgate(ServedRollgate):
    """A RolloutSource serving `model` through Rollgate's local backend and model service."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        envs: Sequence[str],
        *,
        max_batch_size: int = 64,
        weight_version: str = "step-0",
        share_weights: bool = True,
        **kwargs: Any,
    ):
        from rollgate.model_server.local import LocalBackend

        was_training = model.training
        if not share_weights:
            model = copy.deepcopy(model).requires_grad_(False)
        self.model = model
        backend = LocalBackend.from_model(
            model, tokenizer, weight_version=weight_version, max_batch_size=max_batch_size
        )
        model.train(was_training and share_weights)  # the backend switches to eval; a trainer owns its mode
        super().__init__(backend, envs, **kwargs)

    def set_policy_version(self, version: str) -> None:
        """Stamp later generations with `version` (under the engine's weights lock, so no decode
        step straddles an update)."""
        with self.backend.updating_weights(version):
            pass

    def push(self, model: Any, version: str) -> None:
        """Load `model`'s weights into the served copy and stamp `version` on later turns (a
        WeightPusher for rollgate.trainer_adapters.async_rl)."""
        from rollgate.model_server.weights import stage

        if model is self.model:
            self.set_policy_version(version)  # shared weights: already there
            return
        self.backend.load_weights(stage(self.model, model.state_dict(), complete=True), version)

    async def collect(self, rows, repeats, *, sampling, policy_version) -> list[list[Trajectory]]:
        # Generate in eval mode (no dropout), then hand the model back in the mode the trainer left it.
        was_training = self.model.training
        self.model.eval()
        try:
            return await super().collect(rows, repeats, sampling=sampling, policy_version=policy_version)
        finally:
            self.model.train(was_training)
