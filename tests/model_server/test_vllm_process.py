"""The vLLM server process Rollgate starts (rollgate.model_server.vllm_process, a
rollgate.core.server_process.ServerProcess) without vLLM: its lifecycle with a stand-in server
(Python's http.server answering /health), since what is checked is the process handling, not
vLLM (the vLLM tier starts the real one)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rollgate.core.server_process import free_port
from rollgate.model_server.vllm_process import vllm_command, vllm_env, vllm_process


def _stand_in(tmp_path: Path) -> tuple[list[str], int]:
    (tmp_path / "health").write_text("ok")
    port = free_port()
    return [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)], port


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_server_starts_when_healthy_and_stops_with_its_group(tmp_path):
    args, port = _stand_in(tmp_path)
    with vllm_process(args, port, log_path=tmp_path / "server.log") as server:
        assert server.alive() and server.url.endswith(f":{port}")
        pid = server.proc.pid
    assert not server.alive() and _gone(pid, 5)


def test_a_server_that_exits_fails_start_with_its_log(tmp_path):
    server = vllm_process(
        [sys.executable, "-c", "print('no such model'); raise SystemExit(3)"],
        free_port(),
        log_path=tmp_path / "server.log",
    )
    with pytest.raises(RuntimeError, match="exited with 3.*no such model"):
        server.start(timeout_s=30)


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
def test_the_server_ends_when_the_process_that_started_it_is_killed(tmp_path):
    args, port = _stand_in(tmp_path)
    script = textwrap.dedent(
        f"""
        import sys, time
        from rollgate.model_server.vllm_process import vllm_process
        server = vllm_process({args!r}, {port}).start(timeout_s=30)
        print(server.proc.pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        os.kill(parent.pid, signal.SIGKILL)  # no cleanup of its own can run
        parent.wait(timeout=10)
        assert _gone(child, 10), "the server outlived the process that started it"
    finally:
        if parent.poll() is None:
            parent.kill()


def test_the_command_serves_what_the_vllm_backend_needs():
    args = vllm_command("python3", "/m", "policy", 8123, gpu_memory_utilization=0.3)
    joined = " ".join(args)
    for part in ("--dtype float32", "--logprobs-mode processed_logprobs", "--host 127.0.0.1", "--port 8123"):
        assert part in joined
    assert "--gpu-memory-utilization 0.3" in joined
    assert "--gpu-memory-utilization" not in " ".join(vllm_command("python3", "/m", "policy", 8123))
    assert vllm_env(dev_mode=True)["VLLM_SERVER_DEV_MODE"] == "1" and "VLLM_SERVER_DEV_MODE" not in vllm_env()
    assert float(vllm_env()["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"]) > 3.0  # above Rollgate's clients' idle bound
