"""In-process job queue (the embedded shape): the same contract as the Redis one, in memory.

All state changes happen without an await in between, so one event loop needs no locks."""

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
        self._ready: deque[tuple[str, str]] = deque()
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
        self._jobs[spec.job_id] = _Job(spec=spec, tasks={t.key: t for t in tasks})
        self._ready.extend((spec.job_id, t.key) for t in tasks)
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
                    self._ready.appendleft((lease.job_id, lease.key))

    async def claim(self, consumer: str, count: int, *, block_s: float = 1.0) -> list[Claim]:
        deadline = time.monotonic() + block_s
        while True:
            now = time.monotonic()
            self._reclaim_expired(now)
            out: list[Claim] = []
            while self._ready and len(out) < count:
                job_id, key = self._ready.popleft()
                job = self._jobs.get(job_id)
                if job is None or key in job.done:
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
                    self._ready.appendleft((lease.job_id, lease.key))
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

    async def close(self) -> None:
        self._work.set()
