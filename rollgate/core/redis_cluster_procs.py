"""A Redis Cluster of the caller's own on loopback ports, for the `redis_cluster` test tier and
the benchmarks: six redis-server processes (three primaries, three replicas, no persistence)
joined with `redis-cli --cluster create`, a primary can be SIGKILLed (its replica takes over
after `node_timeout_ms`), and every server is stopped by its pid on `close()`."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_ports(n: int) -> list[int]:
    """`n` ports whose cluster bus ports (port + 10000) are free too."""
    out: list[int] = []
    for _ in range(2000):
        p = random.randint(20000, 29999)
        if p not in out and _free(p) and _free(p + 10000):
            out.append(p)
            if len(out) == n:
                return out
    raise RuntimeError("no free loopback ports for a Redis Cluster")


class RedisClusterProcesses:
    def __init__(self, *, nodes: int = 6, node_timeout_ms: int = 1000):
        self.ports = free_cluster_ports(nodes)
        self.node_timeout_ms = node_timeout_ms
        self.base = Path(tempfile.mkdtemp(prefix="rollgate-rcluster-"))
        self.procs: dict[int, subprocess.Popen] = {}

    @property
    def url(self) -> str:
        """The URL every Rollgate part takes for cluster mode: every live node seeds the topology."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports if self.alive(p))

    def _start_node(self, port: int) -> None:
        d = self.base / str(port)
        d.mkdir(exist_ok=True)
        args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d)]
        args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        args += ["--cluster-node-timeout", str(self.node_timeout_ms), "--appendonly", "no", "--save", ""]
        with open(d / "redis.log", "ab") as log:
            self.procs[port] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _cli(self, port: int, *args: str, timeout_s: float = 10.0) -> str:
        out = subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        return out.stdout

    def start(self, timeout_s: float = 60.0) -> RedisClusterProcesses:
        try:
            for p in self.ports:
                self._start_node(p)
            deadline = time.monotonic() + timeout_s
            for p in self.ports:
                while self._cli(p, "ping").strip() != "PONG":
                    if self.procs[p].poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"redis-server on port {p} did not start; see {self.base}")
                    time.sleep(0.05)
            hosts = [f"127.0.0.1:{p}" for p in self.ports]
            created = subprocess.run(
                ["redis-cli", "--cluster", "create", *hosts, "--cluster-replicas", "1", "--cluster-yes"],
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
            if created.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout[-2000:]}{created.stderr}")
            self.wait_ok(deadline - time.monotonic())
        except BaseException:
            self.close()
            raise
        return self

    def cluster_info(self, port: int) -> dict[str, str]:
        lines = self._cli(port, "cluster", "info").splitlines()
        return dict(line.strip().split(":", 1) for line in lines if ":" in line)

    def wait_ok(self, timeout_s: float = 30.0) -> None:
        """Until every live node reports cluster_state:ok and agrees on three primaries."""
        deadline = time.monotonic() + timeout_s
        while True:
            live = [p for p in self.ports if self.alive(p)]
            infos = [self.cluster_info(p) for p in live]
            if all(i.get("cluster_state") == "ok" for i in infos) and len(self.primaries()) == 3:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Redis Cluster did not reach cluster_state:ok ({infos})")
            time.sleep(0.1)

    def primaries(self) -> list[int]:
        """Ports of the live primaries that serve slots, as the live nodes see them."""
        live = [p for p in self.ports if self.alive(p)]
        if not live:
            return []
        out = []
        for line in self._cli(live[0], "cluster", "nodes").splitlines():
            f = line.split()
            if len(f) > 8 and "master" in f[2] and "fail" not in f[2]:
                out.append(int(f[1].split("@", 1)[0].rsplit(":", 1)[1]))
        return sorted(p for p in out if self.alive(p))

    def primary_of(self, key: str) -> int:
        """The port of the primary that serves `key`'s slot."""
        for p in self.primaries():
            slot = int(self._cli(p, "cluster", "keyslot", key).strip())
            for line in self._cli(p, "cluster", "nodes").splitlines():
                f = line.split()
                if "myself" in f[2] and "master" in f[2]:
                    for r in f[8:]:
                        lo, _, hi = r.partition("-")
                        if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                            return p
        raise RuntimeError(f"no live primary serves {key!r}")

    def alive(self, port: int) -> bool:
        proc = self.procs.get(port)
        return proc is not None and proc.poll() is None

    def kill(self, port: int) -> None:
        """SIGKILL one node (a crash): its replica is promoted after the node timeout."""
        proc = self.procs[port]
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> RedisClusterProcesses:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
