"""Storing a record while Redis is gone: the worker tries five times and gives up without a wait
after its last attempt (today's main slept 3.2 s after it). A real Redis server of the test's own,
killed after the task was claimed."""

from __future__ import annotations

import logging
import subprocess
import time

from rollgate.jobs.redis import RedisJobQueue
from rollgate.jobs.worker import COMPLETE_RETRY, Worker
from tests.conftest import free_port
from tests.gateway.test_worker import submit


async def test_giving_up_on_storing_a_record_takes_no_wait_after_the_last_attempt(caplog, redis_server_bin):
    port = free_port()
    proc = subprocess.Popen(
        [redis_server_bin, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    queue = RedisJobQueue(f"redis://127.0.0.1:{port}/0", prefix="rgtest:store", pool_wait_s=1.0)
    try:
        for _ in range(100):
            try:
                job_id = await submit(queue, "math", 1)
                break
            except Exception:  # noqa: BLE001 - the server is still starting
                time.sleep(0.05)
        [claim] = await queue.claim("w1", 1, block_s=0.5)
        proc.kill()
        proc.wait()
        worker = Worker(queue, agent=None, name="w1")  # type: ignore[arg-type]  # no episode runs here
        caplog.set_level(logging.WARNING, logger="rollgate.worker")
        t = time.monotonic()
        await worker._complete(claim, {"task_id": claim.task.task_id, "job_id": job_id})
        took = time.monotonic() - t
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await queue.close()
    attempts = [r for r in caplog.records if "cannot store the record" in r.getMessage()]
    assert len(attempts) == COMPLETE_RETRY.attempts == 5
    assert any("gave up storing" in r.getMessage() for r in caplog.records)
    # four waits of at most 0.2 + 0.4 + 0.8 + 1.6 s; main's fifth wait alone was 3.2 s more
    assert took < 3.0 + 0.5
