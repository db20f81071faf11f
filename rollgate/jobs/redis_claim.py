"""Claiming: one round trip on one Redis server (redis_scripts.CLAIM), and on a Redis Cluster,
where one script cannot read every job's stream (each job's keys live in a slot of their own).

On a cluster, one claim round: RING (the global slot) returns the active jobs from the ring's head and turns
the ring by one, so successive claimers start at successive jobs; the wanted count is dealt out
over those jobs by `priority` (weighted round-robin within the round); then one CLAIM_JOB per job
(its own slot, all in one pipeline) takes the tasks of workers presumed dead first, then new ones.
What a drained job could not give goes to the jobs that gave all they were asked, for up to
three deals. Jobs that are no longer claimable leave the ring.

Fairness is per claim round rather than the single server's credit kept across calls: over many
rounds each job gets tasks in proportion to its priority, as on one server."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from rollgate.jobs.queue import Claim, TaskEnvelope, abandoned_record

if TYPE_CHECKING:
    from rollgate.jobs.redis import RedisJobQueue

log = logging.getLogger("rollgate.queue")

Entry = tuple[str, bytes, str, bool]  # job, entry id, task key, reclaimed

MAX_DEALS = 3


def deal(jobs: list[str], weights: dict[str, int], want: int) -> dict[str, int]:
    """Split `want` tasks over `jobs` in ring order, each up to its weight per pass."""
    out: dict[str, int] = {}
    left = want
    while left > 0 and jobs:
        for j in jobs:
            take = min(max(1, weights.get(j, 1)), left)
            out[j] = out.get(j, 0) + take
            left -= take
            if left == 0:
                break
    return out


async def claim_on_cluster(q: RedisJobQueue, consumer: str, count: int) -> tuple[bytes, list[Entry]]:
    bell, raw_jobs = await q._call(q._ring(keys=[q._k("active"), q._k("bell")], args=[]))
    jobs = list(dict.fromkeys(j.decode() for j in raw_jobs))
    weights = q._priorities  # learnt from CLAIM_JOB's answers (a job's priority never changes)
    if len(weights) > 10_000:
        weights.clear()
    idle = int(q.visibility_timeout_s * 1000)
    out: list[Entry] = []
    gone: list[str] = []
    for _ in range(MAX_DEALS):
        want = count - len(out)
        shares = deal(jobs, weights, want)
        if not shares:
            break
        calls = [
            q._claim_job(keys=[q._jk(j, "stream"), q._jk(j, "stats")], args=[consumer, n, idle])
            for j, n in shares.items()
        ]
        full: list[str] = []
        for (j, n), got in zip(shares.items(), await q._call(asyncio.gather(*calls)), strict=True):
            if got[0] == 0:
                gone.append(j)
                continue
            flat = got[1]
            weights[j] = int(got[2])
            for i in range(0, len(flat), 3):
                out.append((j, flat[i], flat[i + 1].decode(), flat[i + 2] == b"1"))
            if len(flat) // 3 >= n:
                full.append(j)  # it may have more
        jobs = full
        if len(out) >= count:
            break
    for j in gone:
        await q._call(q._r.lrem(q._k("active"), 0, j))
    return bell, out


async def claim_on_server(q: RedisJobQueue, consumer: str, count: int) -> tuple[bytes, list[Entry]]:
    bell, flat = await q._call(
        q._claim_script(
            keys=[q._k("active"), q._k("credit"), q._k("bell")],
            args=[q.prefix, consumer, count, int(q.visibility_timeout_s * 1000)],
        )
    )
    entries = [
        (flat[i].decode(), flat[i + 1], flat[i + 2].decode(), flat[i + 3] == b"1") for i in range(0, len(flat), 4)
    ]
    return bell, entries


async def prepare(q: RedisJobQueue, consumer: str, entries: list[Entry]) -> list[Claim]:
    """Claimed entries -> the tasks to run (their attempts counted); entries of tasks that already
    have a record are acked, and a task past the attempt limit is failed instead of run."""
    if not entries:
        return []
    async with q._r.pipeline(transaction=False) as pipe:
        for job, _eid, key, reclaimed in entries:
            pipe.hget(q._jk(job, "tasks"), key)
            pipe.hexists(q._jk(job, "done"), key)
            pipe.hincrby(q._jk(job, "attempts"), key, 1)
            pipe.expire(q._jk(job, "attempts"), int(q.result_ttl_s))
            if reclaimed:
                pipe.hincrby(q._jk(job, "stats"), "reclaimed", 1)
        replies = await q._call(pipe.execute())
    out: list[Claim] = []
    i = 0
    for job, eid, _key, reclaimed in entries:
        raw, done, attempt = replies[i], replies[i + 1], int(replies[i + 2])
        i += 5 if reclaimed else 4
        delivery = eid.decode()
        if raw is None or done:
            # Job expired, or the task already has its record (cancel, or a slow duplicate).
            await q._ack(job, delivery)
            continue
        task = TaskEnvelope.model_validate_json(raw)
        claim = Claim(task=task, delivery_id=delivery, attempt=attempt)
        if reclaimed:
            log.warning(
                "reclaimed task %s of job %s (attempt %d)",
                task.key,
                task.job_id,
                attempt,
                extra={"job_id": task.job_id},
            )
        if attempt > q.max_attempts:
            await q.complete(claim, abandoned_record(task, attempt - 1))
            continue
        out.append(claim)
        q._watch.held(job, delivery, consumer)
    return out
