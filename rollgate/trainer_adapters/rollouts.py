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
from rollgate.core.errors import ProtocolError
from rollgate.core.rows import Task, group_id, parse_row
from rollgate.core.schemas import FailureRecord, Outcome, PolicyRef, TaskRef, TaskRow, Trajectory

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


class AgentRollouts:
    """The embedded shape: episodes run by an in-process Agent (rollgate.agent_server.agent)."""

    def __init__(self, agent: Any, *, concurrency: int = 64, env: str | None = None):
        self.agent = agent
        self.env = env
        self._limit = asyncio.Semaphore(concurrency) if concurrency > 0 else None

    async def _one(self, task: Task, ctx: RunContext) -> Trajectory:
        if self._limit is None:
            return await self.agent.run(task, ctx)
        async with self._limit:
            return await self.agent.run(task, ctx)

    async def collect(self, rows, repeats, *, sampling, policy_version):
        job = f"job_{uuid.uuid4().hex[:12]}"
        coros = []
        for i, (row, k) in enumerate(zip(rows, repeats, strict=True)):
            # The trainer's rows enter here: parsed once, the Task travels with every sample.
            task = parse_row(
                row, env=self.env, known_envs=self.agent.envs, row_index=i, where=f"rows[{i}]", component="trainer"
            )
            for j in range(k):
                ctx = RunContext(job_id=job, sample_index=j, policy_version=policy_version, sampling=dict(sampling))
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
    NDJSON results stream, resumed by cursor after a disconnect: rollgate.client.gateway)."""

    def __init__(self, base_url: str, *, api_key: str | None = None, env: str | None = None, timeout_s: float = 3600.0):
        self.base_url = base_url
        self.api_key = api_key
        self.env = env
        self.timeout_s = timeout_s

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
            job = client.submit(rows, env=self.env, repeats=repeats, sampling=sampling, policy_version=policy_version)
            for line in client.results(job["job_id"]):
                if line.get("type") in ("trajectory", "failure"):
                    self._place(line["record"], rows, slots, job["job_id"], out)

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
