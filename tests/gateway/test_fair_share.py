"""Fair share between concurrent jobs, over both job queues: workers take tasks in weighted
round-robin across jobs (by `priority`), never first-in-first-out, so a small job submitted after
a large one is not starved by it."""

from __future__ import annotations

import asyncio

from rollgate.jobs.queue import JobSpec, TaskEnvelope
from rollgate.jobs.worker import Worker
from tests.gateway.test_queue_contract import make_job, ok_record
from tests.gateway.test_worker import make_agent, submit, wait_for


def job(job_id: str, n: int, priority: int = 1) -> tuple[JobSpec, list[TaskEnvelope]]:
    spec, tasks = make_job(job_id, n)
    return spec.model_copy(update={"priority": priority}), tasks


async def claim_order(q, n: int, count: int = 1) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        claims = await q.claim("w", count, block_s=0.1)
        assert claims, f"the queue ran dry after {out}"
        out += [c.task.job_id for c in claims]
    return out


async def test_jobs_take_turns_instead_of_first_in_first_out(make_queue):
    q = make_queue()
    await q.submit(*job("big", 20))
    await q.submit(*job("small", 3))
    assert await claim_order(q, 8) == ["big", "small"] * 3 + ["big", "big"]


async def test_one_claim_of_many_tasks_is_shared_between_jobs(make_queue):
    q = make_queue()
    await q.submit(*job("a", 10))
    await q.submit(*job("b", 10))
    await q.submit(*job("c", 10))
    first = await claim_order(q, 6, count=6)
    assert sorted(first) == ["a", "a", "b", "b", "c", "c"]


async def test_priority_weights_the_share(make_queue):
    q = make_queue()
    await q.submit(*job("low", 20, priority=1))
    await q.submit(*job("high", 20, priority=3))
    order = await claim_order(q, 12)
    assert order.count("high") == 9 and order.count("low") == 3
    assert order[:4] == ["low", "high", "high", "high"]


async def test_a_cancelled_job_leaves_the_rotation(make_queue):
    q = make_queue()
    await q.submit(*job("gone", 10))
    await q.submit(*job("kept", 10))
    await q.cancel("gone")
    assert await claim_order(q, 5, count=5) == ["kept"] * 5


async def test_dead_workers_tasks_of_every_job_are_reclaimed(make_queue):
    q = make_queue(visibility_timeout_s=0.2)
    await q.submit(*job("a", 1))
    await q.submit(*job("b", 1))
    assert sorted(c.task.job_id for c in await q.claim("dead", 2, block_s=0.1)) == ["a", "b"]
    await asyncio.sleep(0.3)  # no heartbeat: the worker is presumed dead
    taken = await q.claim("alive", 2, block_s=0.1)
    assert sorted(c.task.job_id for c in taken) == ["a", "b"]
    for c in taken:
        assert c.attempt == 2
        assert await q.complete(c, ok_record(c.task))
    assert (await q.progress("a")).state == (await q.progress("b")).state == "done"


async def test_a_small_job_submitted_after_a_large_one_finishes_long_before_it(make_queue):
    q = make_queue()
    # The real agent and scripted model; verification takes 20 ms so that the large job lasts.
    worker = Worker(q, make_agent(verify_delay=0.02), concurrency=2, block_s=0.1)
    large = await submit(q, "slowmath", 24)  # every example row
    small = await submit(q, "slowmath", 4)
    worker.start()
    try:
        await wait_for(lambda: _finished(q, small), timeout_s=60)
        large_done_then = (await q.progress(large)).done
        await wait_for(lambda: _finished(q, large), timeout_s=120)
    finally:
        await worker.stop()
    s, big = await q.progress(small), await q.progress(large)
    assert s.counts == {"completed": 4} and big.done == 24
    # Round-robin: the small job's 4 tasks ran interleaved with about as many of the large one's
    # (first-in-first-out would have run all 24 first).
    assert large_done_then <= 10, large_done_then
    assert s.finished_at < big.finished_at


async def _finished(q, job_id: str) -> bool:
    return (await q.progress(job_id)).finished
