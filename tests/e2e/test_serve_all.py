"""`rollgate serve` (role all) as a real process: one port serves jobs, and SIGTERM stops it
cleanly. Scripted model backend: the process shape is under test, not the model."""

from __future__ import annotations

import signal
import time

import httpx

from rollgate.core import jsonutil
from tests.conftest import free_port
from tests.gateway.rows import example_rows
from tests.procs import ServerProcess, rollgate_cmd


def test_embedded_server_process_runs_a_job_and_stops_on_sigterm(tmp_path):
    port = free_port()
    rows = example_rows("math", 3)
    proc = ServerProcess(
        rollgate_cmd("serve", "--port", str(port)),
        port,
        log_path=tmp_path / "serve.log",
        env={"ROLLGATE_MODEL__BACKEND": "scripted", "ROLLGATE_ENVS": '["math"]'},
    )
    proc.start(timeout_s=120)
    try:
        client = httpx.Client(base_url=proc.url, timeout=30)
        job_id = client.post("/v1/rollouts", json={"tasks": rows}).json()["job_id"]
        with client.stream("GET", f"/v1/rollouts/{job_id}/results", params={"wait": "true"}) as resp:
            lines = [jsonutil.loads(x) for x in resp.iter_lines()]
        assert [x["type"] for x in lines] == ["trajectory"] * 3 + ["end"]
        assert {x["record"]["outcome"] for x in lines[:3]} == {"completed"}
        client.close()
        started = time.monotonic()
        proc.proc.send_signal(signal.SIGTERM)
        # uvicorn re-raises SIGTERM once its shutdown completed, so -15 is a clean exit too
        assert proc.proc.wait(timeout=30) in (0, -signal.SIGTERM), proc.log_tail()
        assert time.monotonic() - started < 30
        log = proc.log_tail(20_000)
        assert "stopped (3 tasks done, 0 given back)" in log and "Application shutdown complete" in log
    finally:
        proc.kill()
