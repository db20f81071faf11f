"""The Redis job queue under a burst of concurrent calls (the real Redis server).

redis-py's default pool refuses the 101st concurrent call with "Too many connections"; the queue's
bounded blocking pool makes such calls wait for a free connection instead."""

from __future__ import annotations

import asyncio

from rollgate.core import jsonutil
from rollgate.jobs.queue import decode_record
from rollgate.jobs.redis import RedisJobQueue
from tests.gateway.test_queue_contract import make_job, ok_record

BURST = 200


async def test_a_burst_beyond_the_pool_size_waits_instead_of_failing(redis_url, redis_prefix):
    q = RedisJobQueue(redis_url, prefix=redis_prefix, max_connections=16)
    try:
        spec, tasks = make_job("job_burst", BURST)
        await q.submit(spec, tasks)
        claims = await q.claim("w", BURST, block_s=0.2)
        assert len(claims) == BURST

        # Every completion, progress and queue-depth read at once: 3 x BURST concurrent calls.
        done = await asyncio.gather(
            *(q.complete(c, ok_record(c.task)) for c in claims),
            *(q.progress("job_burst") for _ in range(BURST)),
            *(q.queued() for _ in range(BURST)),
        )

        assert all(ok is True for ok in done[:BURST])
        pool = q._r.connection_pool
        assert len(pool._available_connections) + len(pool._in_use_connections) <= 16  # the bound held
        records = [jsonutil.loads(decode_record(raw)[1]) for raw in await q.results("job_burst", 0, 10_000)]
        assert sorted(r["task"]["task_id"] for r in records) == sorted(f"t{i}" for i in range(BURST))
        progress = await q.progress("job_burst")
        assert (progress.done, progress.total, progress.finished) == (BURST, BURST, True)
    finally:
        await q.clear()
        await q.close()
