"""Where a trainer's rollouts come from: the agent in process, or a Rollgate gateway over REST.

Both answer the same question: for these task rows, `repeats[i]` episodes of row i, sampled with
these settings under this policy version, returned per row in sample order. Every episode yields
exactly one trajectory (failed ones carry an error outcome), so callers can index the answer.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

from rollgate.agent_server.agent import RunContext
from rollgate.core.errors import BadRequest, ProtocolError
from rollgate.core.rows import Task, group_id, parse_row
from rollgate.core.schemas import (
    EpisodeRecord,
    FailureRecord,
    Outcome,
    PolicyRef,
    RolePolicy,
    TaskRef,
    TaskRow,
    Trajectory,
)

log = logging.getLogger(__name__)


class RolloutSource(Protocol):
    async def collect(
        self,
        rows: Sequence[dict[str, Any]],
        repeats: Sequence[int],
        *,
        sampling: dict[str, Any],
        policy_version: str | None,
    ) -> list[list[Trajectory]]: ...


def check_train_role(roles: dict[str, Any], train_role: str | None) -> dict[str, Any]:
    """`roles` as policies, checked for training `train_role`: it must be one of them, and it is
    played by the gateway's own model under the trainer's policy version (the policy trained)."""
    if train_role is None:
        raise BadRequest(
            "roles needs train_role: the role whose trajectories the trainer trains on",
            component="trainer",
            field="train_role",
        )
    if train_role not in roles:
        raise BadRequest(
            f"train_role {train_role!r} is not a role of `roles`; they are {', '.join(sorted(roles))}",
            component="trainer",
            field="train_role",
        )
    out = {}
    for role, policy in roles.items():
        try:
            out[role] = RolePolicy.model_validate(policy).model_dump(mode="json", exclude_none=True)
        except ValueError as exc:
            raise BadRequest(f"roles.{role}: {exc}", component="trainer", field=f"roles.{role}") from None
    for key in ("model", "policy_version"):
        if key in out[train_role]:
            raise BadRequest(
                f"roles.{train_role}.{key}: the trained role is played by the gateway's own model, tagged "
                "with the trainer's policy version; give a model or version to the other roles only",
                component="trainer",
                field=f"roles.{train_role}.{key}",
            )
    return out


def trained_trajectory(episode: EpisodeRecord, train_role: str | None) -> Trajectory:
    """The trained role's trajectory of a multi-role episode."""
    for t in episode.trajectories:
        if t.role == train_role:
            return t
    raise ProtocolError(
        f"episode {episode.episode_id} has no trajectory of role {train_role!r}",
        component="agent",
        field="trajectories",
    )


class AgentRollouts:
    """The embedded shape: episodes run by an in-process Agent (rollgate.agent_server.agent).
    With `roles`, `agent` is the stack's AgentSet (it plays multi-role episodes) and each episode
    gives `train_role`'s trajectory, as GatewayRollouts does; `registry` (the stack's) says which
    roles each environment declares."""

    def __init__(
        self,
        agent: Any,
        *,
        concurrency: int = 64,
        env: str | None = None,
        roles: dict[str, Any] | None = None,
        train_role: str | None = None,
        registry: Any = None,
    ):
        self.agent = agent
        self.env = env
        self.registry = registry  # the stack's environments: which roles each declares
        self._limit = asyncio.Semaphore(concurrency) if concurrency > 0 else None
        if roles is None and train_role is not None:
            raise BadRequest("train_role needs roles: every role's policy", component="trainer", field="roles")
        self.roles = check_train_role(roles, train_role) if roles is not None else None
        self.train_role = train_role

    async def _one(self, task: Task, ctx: RunContext) -> Trajectory:
        if self._limit is None:
            result = await self.agent.run(task, ctx)
        else:
            async with self._limit:
                result = await self.agent.run(task, ctx)
        return trained_trajectory(result, self.train_role) if isinstance(result, EpisodeRecord) else result

    def _check_env(self, task: Task, where: str) -> None:
        """Roles only on a multi-role environment, every role mapped (names the role)."""
        from rollgate.agent_server.role_policy import check_roles
        from rollgate.jobs.roles import declared_roles

        declared = declared_roles(task.env, self.registry)
        if declared is None:
            return  # not installed here: the runner checks the roles
        if not declared:
            raise BadRequest(
                f"{where}.env: {task.env} has a single role; `roles` needs a multi-role environment",
                component="trainer",
                field=f"{where}.env",
            )
        check_roles(list(declared), self.roles or {}, env=task.env, component="trainer")

    async def collect(self, rows, repeats, *, sampling, policy_version):
        job = f"job_{uuid.uuid4().hex[:12]}"
        coros = []
        for i, (row, k) in enumerate(zip(rows, repeats, strict=True)):
            # The trainer's rows enter here: parsed once, the Task travels with every sample.
            task = parse_row(
                row, env=self.env, known_envs=self.agent.envs, row_index=i, where=f"rows[{i}]", component="trainer"
            )
            if self.roles is not None:
                self._check_env(task, f"rows[{i}]")
            for j in range(k):
                ctx = RunContext(
                    job_id=job, sample_index=j, policy_version=policy_version, sampling=dict(sampling), roles=self.roles
                )
                coros.append(self._one(task, ctx))
        flat = await asyncio.gather(*coros)
        out, pos = [], 0
        for k in repeats:
            out.append(list(flat[pos : pos + k]))
            pos += k
        return out


def _failed(failure: FailureRecord, row: dict[str, Any], job_id: str, sample_index: int) -> Trajectory:
    """A task the gateway refused, as a trajectory with an error outcome (never a reward)."""
    task_id = failure.task_id or str(row.get("task_id") or "")
    return Trajectory(
        group_id=group_id(task_id, job_id=job_id, row_index=failure.row_index),
        sample_index=sample_index,
        row_index=failure.row_index,
        job_id=job_id,
        task=TaskRef(env=str(row.get("env") or "unknown"), task_id=task_id, row=row),
        policy=PolicyRef(model="unknown"),
        outcome=Outcome.env_error,
        error=failure.error,
    )


class GatewayRollouts:
    """The distributed shape: a rollout job on a Rollgate gateway (POST /v1/rollouts, then its
    NDJSON results stream, resumed by cursor after a disconnect: rollgate.client.gateway).

    With `roles` (a multi-role environment, docs/roles.md), each job maps every role to its policy
    and the trainer gets `train_role`'s trajectory of each episode; the other roles are played by
    the policies `roles` gives them (a frozen opponent: a `model` of the gateway's `role_models`)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        env: str | None = None,
        timeout_s: float = 3600.0,
        roles: dict[str, Any] | None = None,
        train_role: str | None = None,
    ):
        self.base_url = base_url
        self.api_key = api_key
        self.env = env
        self.timeout_s = timeout_s
        if roles is None and train_role is not None:
            raise BadRequest("train_role needs roles: every role's policy", component="trainer", field="roles")
        self.roles = check_train_role(roles, train_role) if roles is not None else None
        self.train_role = train_role

    async def collect(self, rows, repeats, *, sampling, policy_version):
        out: list[list[Trajectory | None]] = [[None] * k for k in repeats]
        # One job per distinct repeat count (a job has one `repeats`); usually exactly one.
        by_count: dict[int, list[int]] = {}
        for i, k in enumerate(repeats):
            if k > 0:
                by_count.setdefault(k, []).append(i)
        async with asyncio.timeout(self.timeout_s):
            await asyncio.gather(
                *(
                    asyncio.to_thread(self._job, [rows[i] for i in idx], idx, k, sampling, policy_version, out)
                    for k, idx in by_count.items()
                )
            )
        missing = sum(t is None for r in out for t in r)
        if missing:
            raise ProtocolError(f"the gateway's job ended with {missing} samples missing", component="gateway")
        return out  # type: ignore[return-value]

    def _job(self, rows, slots, repeats, sampling, policy_version, out) -> None:
        from rollgate.client.gateway import RolloutClient

        rows = [r.row() if isinstance(r, TaskRow) else r for r in rows]
        with RolloutClient(self.base_url, api_key=self.api_key) as client:
            job = client.submit(
                rows, env=self.env, repeats=repeats, sampling=sampling, policy_version=policy_version, roles=self.roles
            )
            for line in client.results(job["job_id"]):
                if line.get("type") in ("trajectory", "failure"):
                    self._place(line["record"], rows, slots, job["job_id"], out)
                elif line.get("type") == "episode":
                    self._place(self._trained(line["record"]), rows, slots, job["job_id"], out)

    def _trained(self, rec: dict[str, Any]) -> dict[str, Any]:
        """The trained role's trajectory of an episode record."""
        return trained_trajectory(EpisodeRecord.model_validate(rec), self.train_role).model_dump(mode="json")

    @staticmethod
    def _place(rec: dict[str, Any], rows, slots, job_id, out) -> None:
        """Put a record in its row's slot: records carry the row's index in the job."""
        failed = "outcome" not in rec  # a FailureRecord: the row was refused, all its samples fail alike
        parsed = FailureRecord.model_validate(rec) if failed else Trajectory.model_validate(rec)
        n = parsed.row_index
        if n is None or not 0 <= n < len(rows):
            raise ProtocolError(
                f"a result's row_index {n!r} names no submitted row", component="gateway", field="row_index"
            )
        row_out = out[slots[n]]
        if failed:
            free = next(j for j, t in enumerate(row_out) if t is None)
            row_out[free] = _failed(parsed, rows[n], job_id, free)
        else:
            row_out[parsed.sample_index] = parsed
