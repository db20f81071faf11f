"""Server processes on loopback ports, for the test suite, the benchmarks and the docker tier:
`ServerProcess` (rollgate.core.server_process: start a command, wait for its health route, and
always clean up), and the Redis servers of the tests' own."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from rollgate.core.server_process import (
    ServerProcess,  # noqa: F401 - re-exported
    end_process,
)


def rollgate_cmd(*args: str) -> list[str]:
    """`rollgate ARGS` run by this interpreter."""
    return [sys.executable, "-m", "rollgate.cli", *args]


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
        if self.alive():
            assert self.proc is not None
            end_process(self.proc, sig, wait_s, group=False)

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
