"""Claims lost with a Redis restart are reclaimed within seconds, with the default 60 s visibility
timeout: a worker that finished its episodes while Redis was down and gave up storing their
records, and whose claims survived in the append-only file, gets them back at once when Redis
returns (rollgate.jobs.redis_reclaim). A Redis server of the test's own with an append-only file,
SIGKILLed (the shared one on 6379 is never touched)."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from devtools.processes import RedisProcess
from rollgate.core.errors import UpstreamError
from rollgate.jobs.redis import RedisJobQueue
from tests.conftest import free_port
from tests.gateway.test_queue_contract import make_job, ok_record


@pytest.fixture
def redis_server():
    server = RedisProcess(free_port()).start()
    yield server
    server.close()


async def claim_until(q: RedisJobQueue, consumer: str, n: int, timeout_s: float) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        try:
            got += await q.claim(consumer, n - len(got), block_s=0.2)
        except UpstreamError:
            await asyncio.sleep(0.1)  # Redis still loading its AOF
    return got


async def test_claims_whose_records_were_lost_with_a_restart_come_back_within_seconds(redis_server):
    q = RedisJobQueue(redis_server.url, prefix="rgtest:restart")  # default visibility timeout: 600 s here
    assert q.visibility_timeout_s >= 60
    try:
        spec, tasks = make_job("job_restart", 4)
        await q.submit(spec, tasks)
        first = await q.claim("w", 4, block_s=0.1)
        assert len(first) == 4
        await q.complete(first[0], ok_record(first[0].task))  # stored before the outage
        await asyncio.to_thread(redis_server.stop, signal.SIGKILL)
        for c in first[1:]:  # the episodes end while Redis is down: their records cannot be stored
            with pytest.raises(UpstreamError):
                await q.complete(c, ok_record(c.task))
        await asyncio.to_thread(redis_server.start)  # the AOF brings the job and the claims back
        started = time.monotonic()
        again = await claim_until(q, "w", 3, timeout_s=15)
        took = time.monotonic() - started
        assert sorted(c.task.key for c in again) == sorted(c.task.key for c in first[1:]), took
        assert took < 10, f"lost claims came back after {took:.1f}s"
        for c in again:
            assert await q.complete(c, ok_record(c.task, who="again"))
        prog = await q.progress("job_restart")
        assert (prog.state, prog.done) == ("done", 4)
    finally:
        await q.clear()
        await q.close()


async def test_a_claim_whose_answer_was_lost_in_the_crash_comes_back_within_seconds(redis_server):
    q = RedisJobQueue(redis_server.url, prefix="rgtest:restart3")
    try:
        spec, tasks = make_job("job_orphan", 2)
        await q.submit(spec, tasks)
        [mine] = await q.claim("w", 1, block_s=0.1)
        # Redis ran the worker's next claim and wrote it to its AOF, then died before answering:
        # the entry is pending under "w", which never learnt of it.
        await q._claim_round("w", 1)
        await asyncio.to_thread(redis_server.restart, signal.SIGKILL)
        started = time.monotonic()
        [orphan] = await claim_until(q, "w", 1, timeout_s=15)
        assert time.monotonic() - started < 10 and orphan.task.key != mine.task.key
        for c in (mine, orphan):
            assert await q.complete(c, ok_record(c.task))
        assert (await q.progress("job_orphan")).state == "done"
    finally:
        await q.clear()
        await q.close()


async def test_claims_still_running_are_not_given_back_after_a_restart(redis_server):
    q = RedisJobQueue(redis_server.url, prefix="rgtest:restart2")
    try:
        spec, tasks = make_job("job_keep", 2)
        await q.submit(spec, tasks)
        running = await q.claim("w", 2, block_s=0.1)
        await asyncio.to_thread(redis_server.restart, signal.SIGKILL)
        assert await claim_until(q, "other", 2, timeout_s=3) == []  # still running under "w"
        for c in running:
            assert await q.complete(c, ok_record(c.task))
        assert (await q.progress("job_keep")).state == "done"
    finally:
        await q.clear()
        await q.close()
