"""Where an evaluation's episodes run: in this process on the composition root (rollgate.stack),
or as rollout jobs on a gateway. Both take the samples still to do and call `on_result` once
per sample as it finishes (completion order), so the caller appends each at once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rollgate.core import jsonutil
from rollgate.core.errors import BadRequest, ProtocolError
from rollgate.core.schemas import ErrorInfo, ErrorKind, FailureRecord, Outcome, PolicyRef, TaskRef, Trajectory
from rollgate.evaluation.samples import COMPONENT
from rollgate.evaluation.tasks import EvalTask

log = logging.getLogger("rollgate.eval")

MAX_JOB_BYTES = 2 * 1024 * 1024  # rows per gateway job, well under its request body limit


@dataclass(frozen=True)
class SampleRequest:
    task: EvalTask
    sample_index: int


OnResult = Callable[[SampleRequest, Trajectory], None]


class Source(Protocol):
    def known_envs(self) -> list[str]: ...

    def run(
        self,
        requests: Sequence[SampleRequest],
        on_result: OnResult,
        *,
        sampling: dict[str, Any],
        policy_version: str | None,
    ) -> None: ...


def failed(req: SampleRequest, error: ErrorInfo, outcome: Outcome = Outcome.env_error) -> Trajectory:
    """A sample that never became an episode, recorded as the failure it is (no reward)."""
    return Trajectory(
        group_id=f"grp_eval_{req.task.task_id}",
        sample_index=req.sample_index,
        task=TaskRef(env=req.task.env, task_id=req.task.task_id, seed=req.task.row.get("seed"), row=req.task.row),
        policy=PolicyRef(model="unknown"),
        outcome=outcome,
        error=error,
    )


class StackSource:
    """Episodes on an in-process stack (rollgate.stack.local_stack): the embedded default."""

    def __init__(self, settings: Any, envs: Sequence[str], *, concurrency: int | None = None):
        self.settings = settings
        self.envs = list(envs)
        self.concurrency = concurrency or settings.agent.concurrency

    def known_envs(self) -> list[str]:
        from rollgate.resources_servers import registry

        return list(registry.env_names())

    def run(self, requests, on_result, *, sampling, policy_version) -> None:
        if requests:
            asyncio.run(self._run(requests, on_result, sampling, policy_version))

    async def _run(self, requests, on_result, sampling, policy_version) -> None:
        from rollgate.agent_server.agent import RunContext
        from rollgate.core.rows import Task, group_id
        from rollgate.stack import local_stack

        stack = local_stack(self.settings, envs=self.envs)
        missing = [e for e in self.envs if e not in stack.runtimes]
        if missing:
            await stack.aclose()
            raise BadRequest(
                f"environment {missing[0]!r} could not be loaded (see the error logged above)",
                component=COMPONENT,
                field="--env",
            )
        pending: Iterator[SampleRequest] = iter(requests)

        async def worker() -> None:
            for req in pending:  # workers share one iterator: at most `concurrency` in flight
                t = req.task
                ctx = RunContext(
                    job_id="eval",
                    group_id=group_id(t.task_id, job_id="eval", row_index=None),
                    sample_index=req.sample_index,
                    policy_version=policy_version,
                    sampling=dict(sampling),
                )
                try:
                    traj = await stack.agent.run(Task.trusted(t.row, task_id=t.task_id, env=t.env), ctx)
                except Exception as exc:  # noqa: BLE001 - every sample must yield a record
                    info = getattr(exc, "info", None)
                    error = (
                        info()
                        if callable(info)
                        else ErrorInfo(
                            kind=ErrorKind.internal, component="agent", message=f"{type(exc).__name__}: {exc}"
                        )
                    )
                    traj = failed(req, error)
                on_result(req, traj)

        try:
            await asyncio.gather(*(worker() for _ in range(max(1, min(self.concurrency, len(requests))))))
        finally:
            await stack.aclose()


def cancel_jobs(client, job_ids: Sequence[str]) -> None:
    """Cancel the jobs a failed or interrupted evaluation submitted: no orphaned work is left behind
    on the gateway. Best effort: a job that cannot be cancelled ends by its TTL."""
    for job_id in job_ids:
        try:
            client.cancel(job_id)
        except Exception:  # noqa: BLE001 - best effort; the job's TTL is the backstop
            log.warning("could not cancel job %s", job_id)


def job_results(client, job_id: str, kinds: tuple[str, ...], rows: int) -> Iterator[tuple[str, dict[str, Any], int]]:
    """(kind, record, row) for each record of `kinds` on a job's results stream; a record whose
    row_index is not one of the job's `rows` is a ProtocolError."""
    for line in client.results(job_id):
        kind, rec = line.get("type"), line.get("record")
        if kind not in kinds:
            continue
        row = rec.get("row_index")
        if not isinstance(row, int) or not 0 <= row < rows:
            raise ProtocolError(f"job {job_id}: a result without a valid row_index", component="gateway")
        yield kind, rec, row


class GatewaySource:
    """Rollout jobs on a gateway (POST /v1/rollouts and its results stream). A job has one
    `repeats` for all its rows, so tasks are grouped by how many samples they still need, and
    a result's sample index is mapped back onto the task's missing indices."""

    def __init__(self, url: str, *, api_key: str | None = None):
        self.url = url
        self.api_key = api_key

    def _client(self):
        from rollgate.client.gateway import RolloutClient

        return RolloutClient(self.url, api_key=self.api_key)

    def known_envs(self) -> list[str]:
        with self._client() as client:
            return client.envs()

    @staticmethod
    def plan(requests: Sequence[SampleRequest]) -> list[tuple[int, list[tuple[EvalTask, list[int]]]]]:
        """[(repeats, [(task, its missing sample indices)])], chunked to bounded job sizes."""
        by_task: dict[tuple[str, str], tuple[EvalTask, list[int]]] = {}
        for r in requests:
            by_task.setdefault((r.task.env, r.task.task_id), (r.task, []))[1].append(r.sample_index)
        by_count: dict[int, list[tuple[EvalTask, list[int]]]] = {}
        for task, idx in by_task.values():
            by_count.setdefault(len(idx), []).append((task, sorted(idx)))
        jobs = []
        for count, entries in sorted(by_count.items()):
            chunk: list[tuple[EvalTask, list[int]]] = []
            size = 0
            for entry in entries:
                n = len(jsonutil.dumps(entry[0].row))
                if chunk and size + n > MAX_JOB_BYTES:
                    jobs.append((count, chunk))
                    chunk, size = [], 0
                chunk.append(entry)
                size += n
            if chunk:
                jobs.append((count, chunk))
        return jobs

    def run(self, requests, on_result, *, sampling, policy_version) -> None:
        jobs = self.plan(requests)
        with self._client() as client:
            submitted = []
            try:
                for repeats, entries in jobs:
                    job = client.submit(
                        [t.row for t, _ in entries],
                        repeats=repeats,
                        sampling=sampling,
                        policy_version=policy_version,
                        purpose="eval",  # the gateway's viewer shows it beside the training reward
                    )
                    submitted.append((job["job_id"], entries))
                for job_id, entries in submitted:
                    self._stream(client, job_id, entries, on_result)
            except BaseException:
                cancel_jobs(client, [job_id for job_id, _ in submitted])
                raise

    @staticmethod
    def _stream(client, job_id: str, entries, on_result: OnResult) -> None:
        free = [list(idx) for _, idx in entries]  # indices not yet filled, per row of the job
        for kind, rec, row in job_results(client, job_id, ("trajectory", "failure"), len(entries)):
            task, wanted = entries[row]
            if not free[row]:
                raise ProtocolError(f"job {job_id}: more results than samples for row {row}", component="gateway")
            if kind == "failure":
                # A failure record does not say which sample it was: it takes a free index.
                failure = FailureRecord.model_validate(rec)
                index = free[row].pop()
                on_result(SampleRequest(task, index), failed(SampleRequest(task, index), failure.error))
                continue
            traj = Trajectory.model_validate(rec)
            s = traj.sample_index
            index = wanted[s] if 0 <= s < len(wanted) and wanted[s] in free[row] else free[row][0]
            free[row].remove(index)
            on_result(SampleRequest(task, index), traj.model_copy(update={"sample_index": index}))
