"""Exactly one record per (row, sample) through Redis data loss, as a trainer streaming the
results sees it: a Redis server of the test's own without persistence, restarted mid-job (so it
comes back empty), the real gateway over HTTP on loopback, the test as the worker. The gateway
notices the loss by itself, lists the job `failed`, and a trainer resuming at its cursor receives
a record for exactly the tasks it has not seen, at the positions after its cursor."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from devtools.processes import RedisProcess
from rollgate.core import jsonutil
from rollgate.jobs.redis import RedisJobQueue
from tests.conftest import free_port
from tests.gateway.serving import gateway_client
from tests.gateway.test_queue_contract import make_job, ok_record


@pytest.fixture
def volatile_redis():
    server = RedisProcess(free_port(), persist=False).start()
    yield server
    server.close()


async def stream(client, job_id: str, cursor: str | None, stop_after: int | None = None) -> list[dict]:
    params = {"wait": "true", **({"cursor": cursor} if cursor else {})}
    out: list[dict] = []
    async with client.stream("GET", f"/v1/rollouts/{job_id}/results", params=params) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.strip():
                got = jsonutil.loads(line)
                if got["type"] != "heartbeat":
                    out.append(got)
                if got["type"] == "end" or (stop_after is not None and len(out) >= stop_after):
                    break
    return out


def task_of(record: dict) -> tuple[int, int]:
    if "trajectory_id" in record and "row_index" not in record:  # ok_record: key in its id
        row, sample = record["trajectory_id"].split("-")[1].split(".")
        return int(row), int(sample)
    return record["row_index"], record["sample_index"]


async def test_records_and_cursor_continue_across_a_restart_that_lost_everything(volatile_redis):
    q = RedisJobQueue(volatile_redis.url, prefix="rgtest:rebuild", visibility_timeout_s=5)
    try:
        spec, tasks = make_job("job_rebuild", 6, repeats=2)
        await q.submit(spec, tasks)
        claims = await q.claim("w", 12, block_s=0.1)
        for c in claims[:5]:
            await q.complete(c, ok_record(c.task))
        async with gateway_client(q) as client:
            # The trainer has processed 3 records; the gateway has read all 5 (one batch).
            seen = await stream(client, "job_rebuild", None, stop_after=3)
            assert [line["cursor"] for line in seen] == ["job_rebuild:1", "job_rebuild:2", "job_rebuild:3"]
            await asyncio.to_thread(volatile_redis.restart, signal.SIGKILL)  # back empty

            # Noticed without anyone reading the job by id: the job list shows it failed.
            deadline = time.monotonic() + 15
            listed: list = []
            while time.monotonic() < deadline and not listed:
                await asyncio.sleep(0.2)
                resp = await client.get("/v1/rollouts")
                if resp.status_code != 200:  # the first call after the restart may find it reconnecting
                    continue
                jobs = resp.json()["jobs"]
                listed = [j for j in jobs if j["job_id"] == "job_rebuild" and j["state"] == "failed"]
            assert listed, "the gateway did not notice the lost job by itself"
            # A worker finishing a task of the lost job adds nothing: the rebuild owns the list.
            assert await q.complete(claims[5], ok_record(claims[5].task)) is False

            rest = await stream(client, "job_rebuild", "job_rebuild:3")
        *records, end = rest
        assert end["type"] == "end" and end["progress"]["state"] == "failed"
        assert [r["cursor"] for r in records] == [f"job_rebuild:{i}" for i in range(4, 13)]
        assert end["cursor"] == "job_rebuild:12" and end["progress"]["done"] == 12
        assert all(r["type"] == "failure" for r in records)
        everything = [task_of(line["record"]) for line in [*seen, *records]]
        assert sorted(everything) == sorted((i, s) for i in range(6) for s in range(2))  # each exactly once
        # The two tasks the gateway had read but the trainer had not come first, in their order.
        read_first = [(c.task.index, c.task.sample_index) for c in claims[3:5]]
        assert [task_of(r["record"]) for r in records[:2]] == read_first
        assert all("Redis data loss" in r["record"]["error"]["message"] for r in records)
    finally:
        await q.clear()
        await q.close()
