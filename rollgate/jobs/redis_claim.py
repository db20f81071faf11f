"""Claiming: one round trip on one Redis server (redis_scripts.CLAIM), and on a Redis Cluster,
where one script cannot read every job's stream (each job's keys live in a slot of their own).

On a cluster, one claim round: RING (the global slot) deals the wanted count over the ring of
active jobs exactly as the one-server script does (the job at the head gives up to its priority,
its credit kept across calls and workers, then moves to the back), from the priorities recorded
at admission; then one CLAIM_JOB per dealt job (its own slot, all in one pipeline) takes the tasks
of workers presumed dead first, then new ones. What a drained job could not give is dealt again
to the others, by priority in ring order, for up to three rounds. Jobs that are no longer
claimable leave the ring. A drained job keeps its place and credit, as on one server.
"""

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
    keys = [q._k("active"), q._k("credit"), q._k("bell"), q._k("prio")]
    bell, flat, raw_ring = await q._call(q._ring(keys=keys, args=[count]))
    shares = {flat[i].decode(): int(flat[i + 1]) for i in range(0, len(flat), 2)}
    ring = list(dict.fromkeys(j.decode() for j in raw_ring))
    weights = q._priorities  # learnt from CLAIM_JOB's answers (a job's priority never changes)
    if len(weights) > 10_000:
        weights.clear()
    idle = int(q.visibility_timeout_s * 1000)
    out: list[Entry] = []
    drained: set[str] = set()
    gone: list[str] = []
    for _ in range(MAX_DEALS):
        calls = [
            q._claim_job(keys=[q._jk(j, "stream"), q._jk(j, "stats")], args=[consumer, n, idle])
            for j, n in shares.items()
        ]
        for (j, n), got in zip(shares.items(), await q._call(asyncio.gather(*calls)), strict=True):
            if got[0] == 0:
                gone.append(j)
                drained.add(j)
                continue
            flat = got[1]
            weights[j] = int(got[2])
            for i in range(0, len(flat), 3):
                out.append((j, flat[i], flat[i + 1].decode(), flat[i + 2] == b"1"))
            if len(flat) // 3 < n:
                drained.add(j)
        left = count - len(out)
        # What drained jobs could not give goes to the others, by priority, in ring order.
        shares = deal([j for j in ring if j not in drained], weights, left) if left > 0 else {}
        if not shares:
            break
    for j in gone:
        await q._leave_ring(j)
    return bell, out


async def claim_on_server(q: RedisJobQueue, consumer: str, count: int) -> tuple[bytes, list[Entry]]:
    bell, flat = await q._call(
        q._claim_script(
            keys=[q._k("active"), q._k("credit"), q._k("bell"), q._k("prio")],
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
