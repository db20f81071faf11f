"""The agent worker: claims tasks from the job queue, runs up to `concurrency` episodes at once,
and completes each task with exactly one record (a Trajectory, or a FailureRecord for a row the
agent refused). Infrastructure failures are re-run before the task is completed (the job's
`retry_errors`), so retries never add records. Claims are heart-beaten while their episode
runs, tasks of a cancelled job are stopped early, and a graceful stop gives unfinished claims
back to the queue at once."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from typing import Any, Protocol

from rollgate.agent_server.agent import RunContext
from rollgate.core.errors import RollgateError, UpstreamError
from rollgate.core.metrics import Metrics
from rollgate.core.retry import RetryPolicy
from rollgate.core.rows import Task
from rollgate.core.schemas import EpisodeRecord, ErrorInfo, ErrorKind, FailureRecord, Outcome, Trajectory
from rollgate.jobs.queue import Claim, JobQueue, TaskEnvelope

log = logging.getLogger("rollgate.worker")


class EpisodeRunner(Protocol):
    """What the worker needs from the agent (rollgate.agent_server.agent.Agent)."""

    async def run(self, task: Task, ctx: RunContext | None = None) -> Trajectory | EpisodeRecord: ...


def worker_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def failure_record(task: TaskEnvelope, info: ErrorInfo) -> dict[str, Any]:
    return FailureRecord(
        task_id=task.task_id, row_index=task.index, sample_index=task.sample_index, job_id=task.job_id, error=info
    ).model_dump(mode="json", exclude_none=True)


# Outcomes caused by the infrastructure (a part failed, hung or answered garbage), not by the
# policy: re-running them as a fresh episode is safe. Completed, truncated and cancelled episodes
# are final: re-running those would bias the sample.
RETRYABLE = frozenset(o.value for o in (Outcome.env_error, Outcome.model_error, Outcome.timeout))
MAX_BACKOFF_S = 30.0  # the longest wait before re-running a failed episode
# The queue unreachable: claim again and again, at most 5 s apart, until it is back.
CLAIM_RETRY = RetryPolicy(None, 0.1, 5.0, jitter=0.2)
# Storing a record: 5 attempts over about 3 s; then the visibility timeout hands the task on.
COMPLETE_RETRY = RetryPolicy(5, 0.2, 1.6, jitter=0.2)
# How often a worker looks for cancelled jobs among the tasks it runs (seconds).
CANCEL_CHECK_S = 0.5


async def run_task(
    agent: EpisodeRunner, task: TaskEnvelope, cancel: asyncio.Event | None = None, *, retry_backoff_s: float = 1.0
) -> dict[str, Any]:
    """One task -> its one record. Never raises: every task must yield a record.

    An episode that ended in an infrastructure failure is re-run (a fresh episode, so a fresh
    session) up to `task.retry_errors` times, with exponential backoff between attempts; each
    attempt has the agent's full episode budget. The record says how many attempts it took and
    keeps the failed attempts' errors in `metrics["attempt_errors"]`."""
    policy = RetryPolicy(task.retry_errors + 1, retry_backoff_s, MAX_BACKOFF_S, jitter=0.2)
    failed: list[dict[str, Any]] = []
    while True:
        record = await _run_once(agent, task, cancel)
        outcome = record.get("outcome")
        if outcome not in RETRYABLE or policy.exhausted(len(failed) + 1) or (cancel is not None and cancel.is_set()):
            break
        failed.append({"attempt": len(failed) + 1, "outcome": outcome, **(record.get("error") or {})})
        log.info(
            "task %s of job %s ended %s (attempt %d of %d); retrying",
            task.key,
            task.job_id,
            outcome,
            len(failed),
            task.retry_errors + 1,
            extra={"job_id": task.job_id},
        )
        if not await policy.wait(len(failed), cancel=cancel):
            break  # the job was cancelled while we waited: the last attempt's record stands
    if "outcome" in record:  # a Trajectory (a refused row is a FailureRecord, never retried)
        # a multi-role episode: each role's trajectory says how many attempts the episode took
        for traj in record.get("trajectories") or [record]:
            traj["attempts"] = len(failed) + 1
            if failed:
                traj.setdefault("metrics", {})["attempt_errors"] = failed
    return record


async def _run_once(agent: EpisodeRunner, task: TaskEnvelope, cancel: asyncio.Event | None) -> dict[str, Any]:
    ctx = RunContext(
        job_id=task.job_id,
        group_id=task.group_id,
        sample_index=task.sample_index,
        policy_version=task.policy_version,
        sampling=dict(task.sampling),
        cancel=cancel,
        agent=task.agent,
        roles=task.roles,
    )
    # Parsed when the job was submitted (rollgate.jobs.plan): rebuilt here without re-validation.
    parsed = Task.trusted(task.row, task_id=task.task_id, env=task.env, row_index=task.index)
    try:
        traj = await agent.run(parsed, ctx)
    except RollgateError as exc:  # a task the agent refuses (e.g. an environment it does not run)
        return failure_record(task, exc.info())
    except Exception as exc:  # a bug: record it against the task rather than lose the task
        log.exception("agent crashed on task %s of job %s", task.key, task.job_id, extra={"job_id": task.job_id})
        return failure_record(
            task,
            ErrorInfo(
                kind=ErrorKind.internal, component="agent", message=f"agent crashed: {type(exc).__name__}: {exc}"
            ),
        )
    return traj.model_dump(mode="json")


class Worker:
    def __init__(
        self,
        queue: JobQueue,
        agent: EpisodeRunner,
        *,
        concurrency: int = 64,
        name: str | None = None,
        metrics: Metrics | None = None,
        block_s: float = 1.0,
        retry_backoff_s: float = 1.0,
    ):
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.queue = queue
        self.agent = agent
        self.concurrency = concurrency
        self.name = name or worker_name()
        self.metrics = metrics if metrics is not None else Metrics.off()
        self.block_s = block_s
        self.retry_backoff_s = retry_backoff_s  # the first wait before re-running a failed episode
        self._inflight: dict[str, tuple[Claim, asyncio.Event, asyncio.Task]] = {}
        self._stopping = asyncio.Event()
        self._loops: list[asyncio.Task] = []
        self.completed = 0

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    def start(self) -> None:
        self._loops = [
            asyncio.create_task(self._claim_loop(), name=f"worker-claim-{self.name}"),
            asyncio.create_task(self._heartbeat_loop(), name=f"worker-heartbeat-{self.name}"),
        ]
        log.info("worker %s started (concurrency %d)", self.name, self.concurrency)

    async def _claim_loop(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            free = self.concurrency - len(self._inflight)
            if free <= 0:
                await asyncio.wait([t for _, _, t in self._inflight.values()], return_when=asyncio.FIRST_COMPLETED)
                continue
            try:
                claims = await self.queue.claim(self.name, free, block_s=self.block_s)
                failures = 0
                # A claim past its first attempt was taken over from a worker presumed dead.
                self.metrics.queue_reclaims.inc(sum(1 for c in claims if c.attempt > 1))
            except Exception as exc:  # noqa: BLE001 - a worker must outlive a queue hiccup
                failures += 1
                if isinstance(exc, UpstreamError):
                    log.warning("worker %s cannot reach the queue: %s; retrying", self.name, exc)
                else:
                    log.exception("worker %s: claiming failed; retrying", self.name)
                await CLAIM_RETRY.wait(failures, cancel=self._stopping)
                continue
            for claim in claims:
                if self._stopping.is_set():
                    await self.queue.release(self.name, [claim])
                    continue
                cancel = asyncio.Event()
                task = asyncio.create_task(self._execute(claim, cancel))
                self._inflight[claim.delivery_id] = (claim, cancel, task)

    async def _execute(self, claim: Claim, cancel: asyncio.Event) -> None:
        try:
            record = await run_task(self.agent, claim.task, cancel, retry_backoff_s=self.retry_backoff_s)
            await self._complete(claim, record)
        finally:
            self._inflight.pop(claim.delivery_id, None)

    async def _complete(self, claim: Claim, record: dict[str, Any]) -> None:
        failed = 0
        while True:
            try:
                stored = await self.queue.complete(claim, record)
                self.completed += 1
                if not stored:
                    log.info(
                        "dropped a duplicate record for task %s of job %s",
                        claim.task.key,
                        claim.task.job_id,
                        extra={"job_id": claim.task.job_id},
                    )
                return
            except UpstreamError as exc:
                failed += 1
                log.warning("cannot store the record of task %s: %s", claim.task.key, exc)
                if not await COMPLETE_RETRY.wait(failed):
                    break
        # Not acked: the queue hands the task to another worker after the visibility timeout.
        log.error("gave up storing the record of task %s of job %s", claim.task.key, claim.task.job_id)

    async def _heartbeat_loop(self) -> None:
        # Claims are extended every `interval`; cancelled jobs are looked for every tick, so a
        # cancel reaches running episodes (and a harness's processes) within about CANCEL_CHECK_S,
        # not a third of the visibility timeout (20 s by default). A check is one pipelined read.
        interval = max(0.2, min(self.queue.visibility_timeout_s / 3, 30.0))
        tick = min(interval, CANCEL_CHECK_S)
        last_beat = time.monotonic()
        while not self._stopping.is_set():
            try:
                await asyncio.wait_for(self._stopping.wait(), timeout=tick)
                return
            except TimeoutError:
                pass
            items = list(self._inflight.values())
            if not items:
                continue
            try:
                if time.monotonic() - last_beat >= interval:
                    await self.queue.heartbeat(self.name, [c for c, _, _ in items])
                    last_beat = time.monotonic()
                dead = await self.queue.cancelled(sorted({c.task.job_id for c, _, _ in items}))
            except Exception as exc:  # noqa: BLE001 - the next beat may succeed; missing many means a takeover
                log.warning("worker %s heartbeat failed: %s", self.name, exc)
                continue
            for claim, cancel, _ in items:
                if claim.task.job_id in dead:
                    cancel.set()

    async def stop(self, drain_timeout_s: float = 30.0) -> None:
        """Stop claiming, let running episodes finish for up to `drain_timeout_s`, then abort the
        rest and give their tasks back to the queue for another worker."""
        self._stopping.set()
        for loop in self._loops:
            loop.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        running = [t for _, _, t in self._inflight.values()]
        if running:
            await asyncio.wait(running, timeout=drain_timeout_s)
        left = list(self._inflight.values())
        for _, _, task in left:
            task.cancel()
        await asyncio.gather(*[t for _, _, t in left], return_exceptions=True)
        if left:
            try:
                await self.queue.release(self.name, [c for c, _, _ in left])
            except UpstreamError as exc:
                log.warning(
                    "could not give back %d tasks (they return after the visibility timeout): %s", len(left), exc
                )
        log.info("worker %s stopped (%d tasks done, %d given back)", self.name, self.completed, len(left))
