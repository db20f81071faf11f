"""Lost queue state on Redis (a restart without persistence, a flush, evicted keys): the job ends
`failed` naming Redis data loss, every task without a record gets a typed failure record, and a
trainer waiting on the results stream gets its `end` line. Real Redis throughout: the shared
server on a database of its own (/15), the loss simulated by deleting only this test's keys
(never FLUSHDB: other tests share the server); persistence checks run Redis servers of their own.
Only the Redis queue applies: the memory queue lives and dies with the process that runs the jobs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from rollgate.commands.checks import Status, check_redis
from rollgate.core import jsonutil
from rollgate.core.errors import NotFound
from rollgate.core.schemas import FailureRecord
from rollgate.jobs.queue import decode_record
from rollgate.jobs.redis import RedisJobQueue
from tests.conftest import free_port
from tests.gateway.serving import gateway_client
from tests.gateway.test_queue_contract import make_job, ok_record

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
async def queue(redis_url, redis_prefix):
    q = RedisJobQueue(redis_url.rsplit("/", 1)[0] + "/15", prefix=redis_prefix, visibility_timeout_s=5)
    yield q
    await q.clear()
    await q.close()


async def lose_everything(q: RedisJobQueue) -> int:
    """What a restart without persistence does to this queue: every key under its prefix is gone."""
    keys = [k async for k in q._r.scan_iter(match=f"{q.prefix}:*", count=500)]
    return await q._r.delete(*keys) if keys else 0


async def all_records(q, job_id: str) -> list[tuple[str, dict]]:
    out = []
    for stored in await q.results(job_id, 0, 10_000):
        kind, raw = decode_record(stored)
        out.append((kind, jsonutil.loads(raw)))
    return out


async def test_a_job_whose_state_vanished_ends_failed_with_a_failure_record_per_task(queue):
    spec, tasks = make_job("job_lost", 5)
    await queue.submit(spec, tasks)
    for c in await queue.claim("w", 2, block_s=0.1):
        await queue.complete(c, ok_record(c.task))
    assert await lose_everything(queue) > 0

    prog = await queue.progress("job_lost")
    assert prog.state == "failed" and prog.finished and prog.done == prog.total == 5
    assert "Redis data loss" in prog.error and "appendonly" in prog.error
    recs = await all_records(queue, "job_lost")
    assert [k for k, _ in recs] == ["failure"] * 5
    failures = [FailureRecord.model_validate(r) for _, r in recs]
    assert sorted(f.row_index for f in failures) == [0, 1, 2, 3, 4]
    assert all(f.error.kind.value == "upstream" and f.error.component == "redis" for f in failures)
    assert all("Redis data loss" in f.error.message and f.job_id == "job_lost" for f in failures)
    assert [j.job_id for j in await queue.list_jobs()] == ["job_lost"]


async def test_evicted_task_records_fail_only_the_tasks_without_a_record(queue):
    spec, tasks = make_job("job_evicted", 4)
    await queue.submit(spec, tasks)
    claims = await queue.claim("w", 4, block_s=0.1)
    for c in claims[:2]:
        await queue.complete(c, ok_record(c.task))
    await queue._r.delete(queue._jk("job_evicted", "tasks"))  # one key evicted under memory pressure

    prog = await queue.progress("job_evicted")
    assert prog.state == "failed" and "tasks" in prog.error
    recs = await all_records(queue, "job_evicted")
    assert [k for k, _ in recs] == ["trajectory", "trajectory", "failure", "failure"]
    done_rows = {int(r["trajectory_id"].split("-")[1].split(".")[0]) for _, r in recs[:2]}
    assert sorted({r["row_index"] for _, r in recs[2:]} | done_rows) == [0, 1, 2, 3]  # one record per task
    # The worker still running a task that got a failure record cannot add a second record.
    assert await queue.complete(claims[2], ok_record(claims[2].task)) is False
    assert (await queue.progress("job_evicted")).done == 4


async def test_a_trainer_waiting_on_the_stream_gets_the_failures_and_the_end(queue):
    spec, tasks = make_job("job_wait", 3)
    await queue.submit(spec, tasks)
    [c] = await queue.claim("w", 1, block_s=0.1)
    await queue.complete(c, ok_record(c.task))
    async with gateway_client(queue) as client:
        got: list[dict] = []

        async def read() -> None:
            url = "/v1/rollouts/job_wait/results"
            async with client.stream("GET", url, params={"cursor": "job_wait:1", "wait": "true"}) as resp:
                assert resp.status_code == 200
                async for line in resp.aiter_lines():
                    if line.strip():
                        got.append(jsonutil.loads(line))

        reader = asyncio.create_task(read())
        await asyncio.sleep(0.3)
        assert not reader.done()  # waiting for the two tasks nobody will ever finish
        started = time.monotonic()
        await lose_everything(queue)
        await asyncio.wait_for(reader, 15)
    assert time.monotonic() - started < 5
    kinds = [line["type"] for line in got if line["type"] != "heartbeat"]
    assert kinds == ["failure", "failure", "end"]
    end = got[-1]
    assert end["cursor"] == "job_wait:3" and end["progress"]["state"] == "failed"
    assert "Redis data loss" in end["progress"]["error"]


async def test_a_finished_job_whose_keys_expired_is_not_found_not_failed(queue):
    spec, tasks = make_job("job_old", 1)
    await queue.submit(spec, tasks)
    [c] = await queue.claim("w", 1, block_s=0.1)
    await queue.complete(c, ok_record(c.task))
    assert (await queue.progress("job_old")).state == "done"
    await lose_everything(queue)  # as the result TTL does once it runs out
    with pytest.raises(NotFound):
        await queue.progress("job_old")


async def test_a_cancelled_job_is_never_turned_into_a_failed_one(queue):
    spec, tasks = make_job("job_cx", 2)
    await queue.submit(spec, tasks)
    await queue.cancel("job_cx")
    await queue._r.delete(queue._jk("job_cx", "tasks"))
    prog = await queue.progress("job_cx")
    assert prog.state == "cancelled" and prog.error is None


@contextlib.contextmanager
def own_redis(tmp_path: Path, *args: str):
    """A Redis server of this test's own on loopback, so its persistence can be configured."""
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"redis://127.0.0.1:{port}/0"
        import redis

        for _ in range(200):
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.02)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--appendonly", "yes"], None),
        (["--appendonly", "no", "--save", ""], "no persistence"),
        (["--appendonly", "no", "--save", "60 1000"], "RDB snapshots only"),
    ],
)
async def test_persistence_is_checked_by_the_queue_and_by_doctor(tmp_path, args, expected):
    with own_redis(tmp_path, *args) as url:
        q = RedisJobQueue(url)
        try:
            problem = await q.persistence_warning()
        finally:
            await q.close()
        result = await check_redis(url, 2.0)
    if expected is None:
        assert problem is None and result.status is Status.ok
    else:
        assert expected in problem
        assert result.status is Status.warn and expected in result.detail and "appendonly yes" in result.fix


async def test_the_gateway_warns_at_start_up_when_redis_has_no_persistence(tmp_path, caplog):
    with own_redis(tmp_path, "--appendonly", "no", "--save", "") as url:
        q = RedisJobQueue(url)
        try:
            with caplog.at_level(logging.WARNING, logger="rollgate.gateway"):
                async with gateway_client(q) as client:
                    assert (await client.get("/healthz")).status_code == 200
        finally:
            await q.close()
    assert any("no persistence" in r.getMessage() and "appendonly yes" in r.getMessage() for r in caplog.records)


def test_the_shipped_redis_keeps_an_append_only_file():
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    docs = list(yaml.safe_load_all((REPO / "k8s" / "base" / "redis.yaml").read_text()))
    k8s = [
        c["args"]
        for d in docs
        if d and d.get("kind") in ("StatefulSet", "Deployment")
        for c in d["spec"]["template"]["spec"]["containers"]
        if c["name"] == "redis"
    ]
    assert k8s, "no redis container in k8s/base/redis.yaml"
    for args in [compose["services"]["redis"]["command"], *k8s]:
        assert args[args.index("--appendonly") + 1] == "yes", args
