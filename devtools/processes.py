"""A server process on a loopback port, for the test suite, the benchmarks and the docker tier:
start a command, wait for its health route, and always clean up (the whole process group;
SIGKILL when SIGTERM is not obeyed in time)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx


def rollgate_cmd(*args: str) -> list[str]:
    """`rollgate ARGS` run by this interpreter."""
    return [sys.executable, "-m", "rollgate.cli", *args]


class ServerProcess:
    def __init__(
        self,
        args: list[str],
        port: int,
        *,
        name: str | None = None,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        health_path: str = "/healthz",
    ):
        self.args = args
        self.port = port
        self.name = name or Path(args[0]).name
        self.url = f"http://127.0.0.1:{port}"
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self.health_path = health_path
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout_s: float = 60.0) -> ServerProcess:
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            self.args, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            self.wait_healthy(timeout_s)
        except RuntimeError:
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
        if not self.alive():
            return
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=wait_s)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class RedisProcess:
    """A Redis server of the caller's own on a loopback port, persisting with an append-only file
    (as the shipped compose and k8s Redis do) into a data folder it removes on `close()`. Fault
    tests restart it and soak runs read its memory without touching a shared Redis."""

    def __init__(self, port: int, *, data_dir: Path | None = None, appendfsync: str = "everysec", persist: bool = True):
        import tempfile

        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self._own_dir = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="rollgate-redis-")) if data_dir is None else data_dir
        self.appendfsync = appendfsync
        self.persist = persist  # False: no AOF, no snapshots (a restart loses everything)
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout_s: float = 30.0) -> RedisProcess:
        import redis

        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data_dir)]
        if self.persist:
            args += ["--appendonly", "yes", "--appendfsync", self.appendfsync, "--save", ""]
        else:
            args += ["--appendonly", "no", "--save", ""]
        with open(self.data_dir / "redis.log", "ab") as log:  # the child keeps its own copy
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        client = redis.Redis.from_url(self.url, socket_connect_timeout=1)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server exited with {self.proc.returncode}; see {self.data_dir}")
                try:
                    if client.ping():  # answers LOADING (an error) until the AOF is replayed
                        return self
                except redis.exceptions.RedisError:
                    time.sleep(0.05)
            self.stop(signal.SIGKILL)
            raise RuntimeError(f"redis-server on port {self.port} not ready within {timeout_s:g}s")
        finally:
            client.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, wait_s: float = 30.0) -> None:
        """SIGTERM: Redis fsyncs its AOF and exits (a clean restart); SIGKILL: a crash."""
        if not self.alive():
            return
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=wait_s)

    def restart(self, sig: int = signal.SIGTERM, down_s: float = 0.0) -> None:
        """Stop, stay down `down_s`, start again on the same port and data (the AOF is replayed)."""
        self.stop(sig)
        time.sleep(down_s)
        self.start()

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> RedisProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
