"""In-process job queue (the embedded shape): the same contract as the Redis one, in memory.

All state changes happen without an await in between, so one event loop needs no locks.
Concurrent jobs share the workers in weighted round-robin (a job gives up to `priority` tasks,
then the next job's turn comes), as the Redis queue does."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from rollgate.core.errors import CapacityError, NotFound
from rollgate.jobs.queue import (
    DEFAULT_MAX_ATTEMPTS,
    Claim,
    JobProgress,
    JobSpec,
    JobState,
    TaskEnvelope,
    abandoned_record,
    cancelled_record,
    encode_record,
    progress_from,
)


@dataclass
class _Job:
    spec: JobSpec
    tasks: dict[str, TaskEnvelope]
    state: JobState = "running"
    results: list[bytes] = field(default_factory=list)
    done: set[str] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)
    reward_sum: float = 0.0
    rewarded: int = 0
    reclaimed: int = 0
    attempts: dict[str, int] = field(default_factory=dict)
    finished_at: float | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    ready: deque[str] = field(default_factory=deque)  # keys waiting for a worker


@dataclass
class _Lease:
    job_id: str
    key: str
    consumer: str
    expires: float


class MemoryJobQueue:
    def __init__(
        self,
        *,
        max_queued_tasks: int = 100_000,
        visibility_timeout_s: float = 600.0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_jobs: int = 1000,
    ):
        self.max_queued_tasks = max_queued_tasks
        self.visibility_timeout_s = visibility_timeout_s
        self.max_attempts = max_attempts
        self.max_jobs = max_jobs  # finished jobs beyond this are forgotten, oldest first
        self._jobs: dict[str, _Job] = {}
        self._ring: deque[str] = deque()  # jobs with waiting tasks, in turn order
        self._credit = 0  # tasks the job at the ring's head may still give before it rotates
        self._leases: dict[str, _Lease] = {}
        self._ids = itertools.count(1)
        self._outstanding = 0  # submitted tasks without a record yet
        self._work = asyncio.Event()

    def _job(self, job_id: str) -> _Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise NotFound(f"unknown rollout job {job_id!r}", component="gateway", field="job_id")
        return job

    async def submit(self, spec: JobSpec, tasks: list[TaskEnvelope]) -> None:
        if self._outstanding + len(tasks) > self.max_queued_tasks:
            raise CapacityError(
                f"the job queue holds {self._outstanding} tasks; {len(tasks)} more would exceed the limit of "
                f"{self.max_queued_tasks} (gateway.max_queued_tasks); retry later",
                component="gateway",
                retry_after_s=5.0,
            )
        self._forget_old_jobs()
        job = self._jobs[spec.job_id] = _Job(spec=spec, tasks={t.key: t for t in tasks})
        job.ready.extend(t.key for t in tasks)
        self._ring.append(spec.job_id)
        self._outstanding += len(tasks)
        self._work.set()

    def _forget_old_jobs(self) -> None:
        finished = [j for j in self._jobs.values() if j.state != "running"]
        excess = len(self._jobs) - self.max_jobs + 1
        for job in sorted(finished, key=lambda j: j.spec.created_at)[: max(0, excess)]:
            del self._jobs[job.spec.job_id]

    def _reclaim_expired(self, now: float) -> None:
        for did, lease in list(self._leases.items()):
            if lease.expires <= now:
                del self._leases[did]
                job = self._jobs.get(lease.job_id)
                if job is not None and lease.key not in job.done:
                    job.reclaimed += 1
                    self._requeue(job, lease.key)

    def _requeue(self, job: _Job, key: str) -> None:
        """A task back in line (its worker died or gave it back): first of its job's tasks."""
        if not job.ready and job.spec.job_id not in self._ring:
            self._ring.append(job.spec.job_id)
        job.ready.appendleft(key)

    def _next_ready(self) -> tuple[_Job, str] | None:
        """The next task in weighted round-robin order across jobs."""
        while self._ring:
            job = self._jobs.get(self._ring[0])
            if job is None or not job.ready:
                self._ring.popleft()  # forgotten, or nothing left to give
                self._credit = 0
                continue
            if self._credit <= 0:
                self._credit = job.spec.priority
            key = job.ready.popleft()
            self._credit -= 1
            if self._credit <= 0 or not job.ready:
                self._ring.rotate(-1)
                self._credit = 0
            return job, key
        return None

    async def claim(self, consumer: str, count: int, *, block_s: float = 1.0) -> list[Claim]:
        deadline = time.monotonic() + block_s
        while True:
            now = time.monotonic()
            self._reclaim_expired(now)
            out: list[Claim] = []
            while len(out) < count and (nxt := self._next_ready()) is not None:
                job, key = nxt
                job_id = job.spec.job_id
                if key in job.done:
                    continue  # cancelled or finished while waiting
                attempt = job.attempts.get(key, 0) + 1
                job.attempts[key] = attempt
                task = job.tasks[key]
                if attempt > self.max_attempts:
                    self._store(job, key, abandoned_record(task, attempt - 1))
                    continue
                did = str(next(self._ids))
                self._leases[did] = _Lease(job_id, key, consumer, now + self.visibility_timeout_s)
                out.append(Claim(task=task, delivery_id=did, attempt=attempt))
            if out or now >= deadline:
                return out
            self._work.clear()
            wait = deadline - now
            if self._leases:
                wait = min(wait, max(0.01, min(le.expires for le in self._leases.values()) - now))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._work.wait(), timeout=wait)

    async def heartbeat(self, consumer: str, claims: list[Claim]) -> None:
        expires = time.monotonic() + self.visibility_timeout_s
        for c in claims:
            lease = self._leases.get(c.delivery_id)
            if lease is not None and lease.consumer == consumer:
                lease.expires = expires

    async def release(self, consumer: str, claims: list[Claim]) -> None:
        for c in claims:
            lease = self._leases.get(c.delivery_id)
            if lease is not None and lease.consumer == consumer:
                del self._leases[c.delivery_id]
                job = self._jobs.get(lease.job_id)
                if job is not None and lease.key not in job.done:
                    job.attempts[lease.key] = max(0, job.attempts.get(lease.key, 1) - 1)
                    self._requeue(job, lease.key)
        self._work.set()

    def _store(self, job: _Job, key: str, record: dict[str, Any]) -> bool:
        if key in job.done:
            return False
        stored, label, reward = encode_record(record)
        job.done.add(key)
        job.results.append(stored)
        job.counts[label] = job.counts.get(label, 0) + 1
        if reward is not None:
            job.reward_sum += reward
            job.rewarded += 1
        self._outstanding -= 1
        if len(job.done) == len(job.tasks) and job.state == "running":
            job.state = "done"
            job.finished_at = time.time()
        job.changed.set()
        return True

    async def complete(self, claim: Claim, record: dict[str, Any]) -> bool:
        self._leases.pop(claim.delivery_id, None)
        job = self._jobs.get(claim.task.job_id)
        if job is None:
            return False
        return self._store(job, claim.task.key, record)

    async def cancel(self, job_id: str) -> JobProgress:
        job = self._job(job_id)
        if job.state == "running":
            job.state = "cancelled"
            job.finished_at = time.time()
            for key, task in job.tasks.items():
                if key not in job.done:
                    self._store(job, key, cancelled_record(task, job.spec))
        return self._progress(job)

    async def cancelled(self, job_ids: list[str]) -> set[str]:
        return {j for j in job_ids if (job := self._jobs.get(j)) is None or job.state == "cancelled"}

    def _progress(self, job: _Job) -> JobProgress:
        return progress_from(
            job.spec,
            job.state,
            len(job.done),
            dict(job.counts),
            job.reward_sum,
            job.rewarded,
            job.reclaimed,
            job.finished_at,
        )

    async def progress(self, job_id: str) -> JobProgress:
        return self._progress(self._job(job_id))

    async def list_jobs(self, limit: int = 100) -> list[JobProgress]:
        jobs = sorted(self._jobs.values(), key=lambda j: j.spec.created_at, reverse=True)
        return [self._progress(j) for j in jobs[:limit]]

    async def results(self, job_id: str, after: int, limit: int = 1000) -> list[bytes]:
        return self._job(job_id).results[after : after + limit]

    async def wait_results(self, job_id: str, after: int, *, limit: int = 1000, timeout_s: float = 10.0) -> list[bytes]:
        job = self._job(job_id)
        deadline = time.monotonic() + timeout_s
        while True:
            out = job.results[after : after + limit]
            remaining = deadline - time.monotonic()
            if out or job.state != "running" or remaining <= 0:
                return out
            job.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(job.changed.wait(), timeout=remaining)

    async def queued(self) -> int:
        return self._outstanding

    async def persistence_warning(self) -> str | None:
        return None  # the embedded shape: the queue lives and dies with the process that runs the jobs

    async def sweep_lost(self) -> int:
        return 0  # nothing to lose apart from the process itself

    async def close(self) -> None:
        self._work.set()
