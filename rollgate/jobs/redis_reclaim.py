"""Claims lost with a Redis restart come back within seconds, not after the visibility timeout.

A worker's claim is an entry pending under its consumer name. When Redis goes away, a worker may
finish an episode and fail to store its record (it gives up after a few tries), and a restart may
lose the write that acked an entry: either way the entry stays pending under a live worker that no
longer runs it and never heart-beats it, so before this it waited out the visibility timeout
(60 s by default) for another worker's XAUTOCLAIM.

So each queue object remembers which claims its consumers still run (handed out by `claim`,
forgotten by `complete` or `release`, whether or not the store succeeded) and, in `claim`, looks
for a restart at most every CHECK_EVERY_S: a changed server run id (on a cluster, any primary's:
a failover may lose writes too) or a call that failed since the last look. Then every entry
pending under one of its consumers that it does not run is given back at once (the visibility
idle is set past the timeout, as a graceful stop does), and the bell wakes idle workers. A
record stored meanwhile by the first worker still wins: records are "set if absent" per task."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollgate.jobs.redis import RedisJobQueue

log = logging.getLogger("rollgate.queue")

CHECK_EVERY_S = 1.0
PENDING_PAGE = 1000


class RestartWatch:
    def __init__(self) -> None:
        self.running: dict[tuple[str, str], str] = {}  # (job, entry id) -> consumer
        self.consumers: set[str] = set()
        self.run_ids: frozenset[str] | None = None
        self.failed = False  # a call failed since the last look
        self.next_check = 0.0

    def held(self, job_id: str, delivery_id: str, consumer: str) -> None:
        self.running[(job_id, delivery_id)] = consumer
        self.consumers.add(consumer)

    def done(self, job_id: str, delivery_id: str) -> None:
        self.running.pop((job_id, delivery_id), None)


async def run_ids(q: RedisJobQueue) -> frozenset[str]:
    if q.cluster:
        info = await q._r.info("server", target_nodes=q._r.PRIMARIES)
        nodes: Any = info.values() if info and all(isinstance(v, dict) for v in info.values()) else [info]
        return frozenset(str(n.get("run_id")) for n in nodes)
    return frozenset([str((await q._r.info("server")).get("run_id"))])


async def maybe_reclaim(q: RedisJobQueue) -> None:
    w = q._watch
    now = time.monotonic()
    if now < w.next_check or not w.consumers:
        return
    w.next_check = now + CHECK_EVERY_S
    ids = await q._call(run_ids(q))
    restarted = w.run_ids is not None and ids != w.run_ids
    w.run_ids = ids
    if restarted or w.failed:
        w.failed = False
        n = await reclaim_lost(q)
        if n:
            why = "Redis restarted" if restarted else "Redis was unreachable"
            log.warning("%s: gave back %d claim(s) that no worker of this process runs any more", why, n)


async def reclaim_lost(q: RedisJobQueue) -> int:
    """Give back every entry pending under this process's consumers that none of them runs."""
    w = q._watch
    jobs = [j.decode() for j in await q._call(q._r.lrange(q._k("active"), 0, -1))]
    given = 0
    idle_ms = int(q.visibility_timeout_s * 1000) + 1000
    for job in dict.fromkeys(jobs):
        stream = q._jk(job, "stream")
        for consumer in list(w.consumers):
            try:
                pending = await q._call(
                    q._r.xpending_range(stream, "workers", "-", "+", PENDING_PAGE, consumername=consumer)
                )
            except Exception as exc:  # noqa: BLE001 - a job whose stream is gone has nothing to give
                if "NOGROUP" in str(exc) or "no such key" in str(exc).lower():
                    continue
                raise
            lost = [p["message_id"] for p in pending if (job, _s(p["message_id"])) not in w.running]
            if lost:
                given += await q._call(q._touch(keys=[stream], args=[consumer, idle_ms, *lost]))
    if given:
        await q._call(q._r.xadd(q._k("bell"), {"reclaimed": given}, maxlen=100, approximate=True))
    return given


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
