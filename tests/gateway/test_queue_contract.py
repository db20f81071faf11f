"""One contract suite for the job queue, run against both implementations (Redis: the real
server, with a unique key prefix per test)."""

from __future__ import annotations

import asyncio

import pytest

from rollgate.core import jsonutil
from rollgate.core.errors import CapacityError, NotFound
from rollgate.jobs.queue import JobSpec, TaskEnvelope, decode_record


def make_job(job_id: str, n: int, repeats: int = 1) -> tuple[JobSpec, list[TaskEnvelope]]:
    spec = JobSpec(
        job_id=job_id, num_tasks=n * repeats, num_rows=n, repeats=repeats, env="counter", policy_version="v7", model="m"
    )
    tasks = [
        TaskEnvelope(
            job_id=job_id,
            key=f"{i}.{s}",
            index=i,
            sample_index=s,
            group_id=f"g{i}",
            task_id=f"t{i}",
            row={"responses_create_params": {"input": f"task {i}"}, "task_id": f"t{i}"},
            env="counter",
            policy_version="v7",
        )
        for i in range(n)
        for s in range(repeats)
    ]
    return spec, tasks


def ok_record(task: TaskEnvelope, reward: float = 1.0, who: str = "w") -> dict:
    return {
        "trajectory_id": f"traj-{task.key}-{who}",
        "task": {"task_id": task.task_id},
        "outcome": "completed",
        "reward": reward,
        "job_id": task.job_id,
        "sample_index": task.sample_index,
        "who": who,
    }


async def read_all(q, job_id: str) -> list[dict]:
    out = []
    for stored in await q.results(job_id, 0, 10_000):
        _, raw = decode_record(stored)
        out.append(jsonutil.loads(raw))
    return out


async def test_claimed_tasks_complete_into_one_record_each(make_queue):
    q = make_queue()
    spec, tasks = make_job("job_a", 5, repeats=2)
    await q.submit(spec, tasks)
    assert await q.queued() == 10
    claims = await q.claim("w1", 4, block_s=0.1)
    claims += await q.claim("w1", 20, block_s=0.1)
    assert sorted(c.task.key for c in claims) == sorted(t.key for t in tasks)
    for c in claims:
        assert await q.complete(c, ok_record(c.task, reward=c.task.index / 4))
    prog = await q.progress("job_a")
    assert (prog.state, prog.done, prog.total, prog.counts) == ("done", 10, 10, {"completed": 10})
    assert prog.mean_reward == pytest.approx(sum(i / 4 for i in range(5)) * 2 / 10)
    assert prog.finished_at is not None
    assert await q.queued() == 0
    records = await read_all(q, "job_a")
    assert len(records) == 10 and len({r["trajectory_id"] for r in records}) == 10
    assert await q.claim("w1", 5, block_s=0.05) == []


async def test_results_resume_from_any_position_in_completion_order(make_queue):
    q = make_queue()
    spec, tasks = make_job("job_r", 6)
    await q.submit(spec, tasks)
    claims = await q.claim("w", 6, block_s=0.1)
    for c in reversed(claims):
        await q.complete(c, ok_record(c.task))
    first = [jsonutil.loads(decode_record(s)[1])["trajectory_id"] for s in await q.results("job_r", 0, 4)]
    rest = [jsonutil.loads(decode_record(s)[1])["trajectory_id"] for s in await q.results("job_r", 4, 100)]
    assert first == [f"traj-{c.task.key}-w" for c in reversed(claims)][:4]
    assert len(rest) == 2 and not set(first) & set(rest)


async def test_dead_worker_tasks_are_reclaimed_after_visibility_timeout(make_queue):
    q = make_queue(visibility_timeout_s=0.3)
    spec, tasks = make_job("job_d", 3)
    await q.submit(spec, tasks)
    dead = await q.claim("dead", 3, block_s=0.1)
    assert len(dead) == 3
    assert await q.claim("alive", 3, block_s=0.05) == []  # still leased to "dead"
    await asyncio.sleep(0.4)
    taken = await q.claim("alive", 3, block_s=0.5)
    assert sorted(c.task.key for c in taken) == sorted(t.key for t in tasks)
    assert all(c.attempt == 2 for c in taken)
    for c in taken:
        await q.complete(c, ok_record(c.task, who="alive"))
    prog = await q.progress("job_d")
    assert prog.state == "done" and prog.reclaimed == 3


async def test_heartbeat_keeps_a_long_episode_from_being_reclaimed(make_queue):
    q = make_queue(visibility_timeout_s=0.4)
    spec, tasks = make_job("job_h", 1)
    await q.submit(spec, tasks)
    mine = await q.claim("slow", 1, block_s=0.1)
    for _ in range(4):
        await asyncio.sleep(0.2)
        await q.heartbeat("slow", mine)
    assert await q.claim("other", 1, block_s=0.05) == []
    assert await q.complete(mine[0], ok_record(mine[0].task))


async def test_duplicate_execution_after_reclaim_yields_one_record(make_queue):
    q = make_queue(visibility_timeout_s=0.2)
    spec, tasks = make_job("job_x", 2)
    await q.submit(spec, tasks)
    slow = await q.claim("slow", 2, block_s=0.1)
    await asyncio.sleep(0.3)
    fast = await q.claim("fast", 2, block_s=0.5)
    assert len(fast) == 2
    for c in fast:
        assert await q.complete(c, ok_record(c.task, who="fast"))
    for c in slow:  # the "dead" worker was only slow: its late results are dropped
        assert not await q.complete(c, ok_record(c.task, who="slow"))
    records = await read_all(q, "job_x")
    assert sorted(r["who"] for r in records) == ["fast", "fast"]
    assert (await q.progress("job_x")).done == 2
    assert await q.queued() == 0


async def test_released_claims_are_taken_at_once_by_another_worker(make_queue):
    q = make_queue(visibility_timeout_s=30)
    spec, tasks = make_job("job_rel", 2)
    await q.submit(spec, tasks)
    mine = await q.claim("stopping", 2, block_s=0.1)
    await q.release("stopping", mine)
    taken = await q.claim("other", 2, block_s=0.5)
    assert sorted(c.task.key for c in taken) == ["0.0", "1.0"]


async def test_cancel_gives_every_unfinished_task_one_cancelled_record(make_queue):
    q = make_queue()
    spec, tasks = make_job("job_c", 4)
    await q.submit(spec, tasks)
    running = await q.claim("w", 2, block_s=0.1)
    await q.complete(running[0], ok_record(running[0].task))
    prog = await q.cancel("job_c")
    assert prog.state == "cancelled" and prog.done == 4
    assert prog.counts == {"completed": 1, "cancelled": 3}
    assert await q.cancelled(["job_c"]) == {"job_c"}
    # the in-flight episode finishing later adds nothing; queued tasks are never handed out
    assert not await q.complete(running[1], ok_record(running[1].task))
    assert await q.claim("w", 10, block_s=0.1) == []
    records = await read_all(q, "job_c")
    assert len(records) == 4
    cancelled = [r for r in records if r["outcome"] == "cancelled"]
    assert len(cancelled) == 3
    assert all(r["reward"] is None and r["error"]["kind"] == "cancelled" for r in cancelled)
    assert all(r["policy"]["policy_version"] == "v7" and r["job_id"] == "job_c" for r in cancelled)
    assert await q.queued() == 0
    # cancelling again (or a finished job) changes nothing
    assert (await q.cancel("job_c")).done == 4


async def test_queue_refuses_a_job_beyond_capacity(make_queue):
    q = make_queue(max_queued_tasks=5)
    spec, tasks = make_job("job_1", 4)
    await q.submit(spec, tasks)
    spec2, tasks2 = make_job("job_2", 2)
    with pytest.raises(CapacityError) as err:
        await q.submit(spec2, tasks2)
    assert err.value.status == 503 and err.value.retry_after_s > 0
    assert "max_queued_tasks" in err.value.message
    with pytest.raises(NotFound):
        await q.progress("job_2")  # refused whole, nothing half-submitted
    for c in await q.claim("w", 4, block_s=0.1):
        await q.complete(c, ok_record(c.task))
    await q.submit(spec2, tasks2)  # room again once tasks are recorded


async def test_a_task_that_kills_every_worker_is_failed_not_retried_forever(make_queue):
    q = make_queue(visibility_timeout_s=0.1, max_attempts=2)
    spec, tasks = make_job("job_p", 1)
    await q.submit(spec, tasks)
    for attempt in (1, 2):
        got = await q.claim(f"victim{attempt}", 1, block_s=0.5)
        assert [c.attempt for c in got] == [attempt]
        await asyncio.sleep(0.15)
    assert await q.claim("next", 1, block_s=0.3) == []
    records = await read_all(q, "job_p")
    assert len(records) == 1 and records[0]["error"]["kind"] == "internal"
    assert "claimed 2 times" in records[0]["error"]["message"]
    assert (await q.progress("job_p")).counts == {"failed": 1}


async def test_unknown_job_is_not_found(make_queue):
    q = make_queue()
    with pytest.raises(NotFound) as err:
        await q.progress("job_nope")
    assert err.value.field == "job_id"


async def test_jobs_are_listed_newest_first(make_queue):
    q = make_queue()
    for name in ("job_old", "job_new"):
        spec, tasks = make_job(name, 1)
        await q.submit(spec, tasks)
        await asyncio.sleep(0.01)
    ids = [p.job_id for p in await q.list_jobs()]
    assert ids.index("job_new") < ids.index("job_old")


async def test_waiting_reader_wakes_when_a_record_lands(make_queue):
    q = make_queue()
    spec, tasks = make_job("job_w", 1)
    await q.submit(spec, tasks)
    reader = asyncio.create_task(q.wait_results("job_w", 0, timeout_s=5))
    await asyncio.sleep(0.1)
    assert not reader.done()
    [c] = await q.claim("w", 1, block_s=0.1)
    await q.complete(c, ok_record(c.task))
    got = await asyncio.wait_for(reader, 2)
    assert len(got) == 1


async def test_redis_queue_recovers_when_its_stream_disappears(redis_url, redis_prefix):
    from rollgate.jobs.redis import RedisJobQueue

    q = RedisJobQueue(redis_url, prefix=redis_prefix)
    try:
        spec, tasks = make_job("job_before", 1)
        await q.submit(spec, tasks)
        await q._r.delete(q._jk("job_before", "stream"))  # e.g. evicted under memory pressure
        spec, tasks = make_job("job_after", 1)
        await q.submit(spec, tasks)
        claims = await q.claim("w", 5, block_s=0.2)
        assert [c.task.job_id for c in claims] == ["job_after"]
        lost = await q.progress("job_before")  # noticed, not left running (tests/gateway/test_lost_state.py)
        assert lost.state == "failed" and lost.done == 1 and "stream" in lost.error
    finally:
        await q.clear()
        await q.close()


async def test_a_finished_job_left_in_the_ring_by_a_crash_leaves_it_at_the_next_claim(redis_url, redis_prefix):
    from rollgate.jobs.redis import RedisJobQueue

    q = RedisJobQueue(redis_url, prefix=redis_prefix)
    try:
        spec, tasks = make_job("job_ring", 1)
        await q.submit(spec, tasks)
        [c] = await q.claim("w", 1, block_s=0.1)
        assert await q.complete(c, ok_record(c.task))
        # The worker that finished it died before taking it out of the ring (a second call).
        await q._r.rpush(q._k("active"), "job_ring")
        assert await q.claim("w", 1, block_s=0.05) == []
        assert await q._r.lrange(q._k("active"), 0, -1) == []
        assert await q.queued() == 0
    finally:
        await q.clear()
        await q.close()
