"""A server process on a loopback port: start a command, wait for its health route, and always
clean up (the whole process group; SIGKILL when SIGTERM is not obeyed in time). The vLLM server a
learning recipe generates with (rollgate.model_server.vllm_process) and the servers the test
suite, the benchmarks and the docker tier start (devtools.processes) are this one class."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    """A loopback port nothing listens on now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _end_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it dies, however it dies
    (a trainer killed with SIGKILL would otherwise leave vLLM holding its port and GPU memory).
    Linux ties this to the thread that started the child: start servers from one that lives as
    long as they should (the recipe's main thread)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)


def end_process(proc: subprocess.Popen, sig: int, wait_s: float, *, group: bool) -> None:
    """Send `sig` to `proc` (to its whole process group when `group`) and wait for it; SIGKILL if
    it is still there after `wait_s`."""
    send = os.killpg if group else os.kill
    with contextlib.suppress(ProcessLookupError):
        send(proc.pid, sig)
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            send(proc.pid, signal.SIGKILL)
        proc.wait(timeout=wait_s)


class ServerProcess:
    """`end_with_parent`: on Linux the server also gets SIGTERM when the process that started it
    dies (for a server that must not outlive its user: the recipe's vLLM)."""

    def __init__(
        self,
        args: list[str],
        port: int,
        *,
        name: str | None = None,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        health_path: str = "/healthz",
        end_with_parent: bool = False,
    ):
        self.args = args
        self.port = port
        self.name = name or Path(args[0]).name
        self.url = f"http://127.0.0.1:{port}"
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self.health_path = health_path
        self.end_with_parent = end_with_parent and sys.platform == "linux"
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout_s: float = 60.0) -> ServerProcess:
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            self.args,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_end_with_parent if self.end_with_parent else None,
        )
        try:
            self.wait_healthy(timeout_s)
        except BaseException:  # not healthy, or interrupted while waiting: never left running
            self.stop()
            raise
        return self

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; log: {self.log_tail()}")
            try:
                if httpx.get(self.url + self.health_path, timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} not healthy within {timeout_s:g}s; log: {self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        if self.log_path and self.log_path.exists():
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        return "(no log)"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL, wait_s: float = 10.0) -> None:
        """Send `sig` to the process group and wait; SIGKILL if it is still there after `wait_s`."""
        if self.alive():
            assert self.proc is not None
            end_process(self.proc, sig, wait_s, group=True)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
