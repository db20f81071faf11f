"""The results stream when Redis goes away mid-stream (a restart): the response ends without an
`end` line and without a server error (only a warning), and the trainer resumes by cursor once
Redis is back, receiving every record exactly once. A Redis server of the test's own with an
append-only file, so it can be stopped and restarted (the shared one on 6379 is never touched)."""

from __future__ import annotations

import asyncio
import logging
import signal

import pytest

from devtools.processes import RedisProcess
from rollgate.core import jsonutil
from rollgate.core.errors import UpstreamError
from rollgate.jobs.redis import RedisJobQueue
from tests.conftest import free_port
from tests.gateway.serving import gateway_client
from tests.gateway.test_queue_contract import make_job, ok_record


@pytest.fixture
def redis_server():
    server = RedisProcess(free_port()).start()
    yield server
    server.close()


async def read(client, job_id: str, cursor: str | None = None) -> list[dict]:
    params = {"wait": "true", **({"cursor": cursor} if cursor else {})}
    out = []
    async with client.stream("GET", f"/v1/rollouts/{job_id}/results", params=params) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.strip():
                out.append(jsonutil.loads(line))
    return out


async def complete_when_back(q: RedisJobQueue, n: int) -> None:
    """Claim and complete `n` tasks, riding out the reconnects right after the restart."""
    for _ in range(100):
        try:
            for c in await q.claim("w", n, block_s=0.1):
                assert await q.complete(c, ok_record(c.task))
                n -= 1
            if n == 0:
                return
        except UpstreamError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"{n} tasks left unclaimed after Redis came back")


async def test_a_stream_cut_by_a_redis_restart_ends_quietly_and_resumes_by_cursor(redis_server, caplog):
    q = RedisJobQueue(redis_server.url, prefix="rgtest:outage", visibility_timeout_s=5)
    try:
        spec, tasks = make_job("job_outage", 3)
        await q.submit(spec, tasks)
        [c] = await q.claim("w", 1, block_s=0.1)
        assert await q.complete(c, ok_record(c.task))
        with caplog.at_level(logging.WARNING):
            async with gateway_client(q) as client:
                reader = asyncio.create_task(read(client, "job_outage"))
                await asyncio.sleep(0.5)  # the first record is out; the stream waits for the rest
                assert not reader.done()
                await asyncio.to_thread(redis_server.stop, signal.SIGKILL)
                got = await asyncio.wait_for(reader, 30)  # ends: no exception, no `end` line
                assert [x["type"] for x in got if x["type"] != "heartbeat"] == ["trajectory"]
                cursor = got[-1]["cursor"]

                await asyncio.to_thread(redis_server.start)  # the AOF brings the job back
                await complete_when_back(q, 2)
                rest = await read(client, "job_outage", cursor)
    finally:
        await q.close()
    assert [x["type"] for x in rest if x["type"] != "heartbeat"] == ["trajectory", "trajectory", "end"]
    assert rest[-1]["progress"]["state"] == "done" and rest[-1]["cursor"] == "job_outage:3"
    keys = [x["record"]["trajectory_id"] for x in got + rest if x["type"] == "trajectory"]
    assert sorted(keys) == ["traj-0.0-w", "traj-1.0-w", "traj-2.0-w"]  # each record exactly once
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert any("results stream of job job_outage ended at job_outage:1" in m for _, m in messages), messages
    assert not [m for level, m in messages if level >= logging.ERROR], messages
