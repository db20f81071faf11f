"""Real server processes for tests: start `rollgate serve ...` (or any command), wait for
/healthz, and always clean up (SIGKILL on the whole group if SIGTERM is ignored)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx


class ServerProcess:
    def __init__(
        self,
        args: list[str],
        port: int,
        *,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        health_path: str = "/healthz",
    ):
        self.args = args
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self.health_path = health_path
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60.0) -> ServerProcess:
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            self.args, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.wait_healthy(timeout_s)
        return self

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.args} exited with {self.proc.returncode}; log: {self.log_tail()}")
            try:
                if httpx.get(self.url + self.health_path, timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.args} not healthy within {timeout_s}s; log: {self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        if self.log_path and self.log_path.exists():
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        return "(no log)"

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.kill(signal.SIGTERM)


def rollgate_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "rollgate.cli", *args]
