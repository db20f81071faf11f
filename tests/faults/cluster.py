"""The cluster shape as real processes on loopback for the fault matrix, from
rollgate.core.topology (what compose.yaml runs): a model server (scripted backend), two math
resources replicas, two agent workers and a gateway, over a Redis server of the matrix's own with
an append-only file (so it can be restarted without touching the shared one on 6379).

Budgets are tight so that a fault shows within seconds: a dead worker's claims move on after the
5 s visibility timeout, a hung model call gives up after 3 s."""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from devtools.processes import RedisProcess, ServerProcess, rollgate_cmd
from rollgate.core.topology import loopback_topology
from tests.conftest import free_port

START_TIMEOUT_S = 180.0  # imports on a busy 2-core machine can take a while

SETTINGS = {
    "ROLLGATE_LOG_LEVEL": "WARNING",
    "ROLLGATE_GATEWAY__UI": "false",
    "ROLLGATE_MODEL__MODEL_PATH": "",  # scripted without a tokenizer: no model to build
    "ROLLGATE_MODEL__SERVED_NAME": "scripted",
    "ROLLGATE_GATEWAY__VISIBILITY_TIMEOUT_S": "5",
    "ROLLGATE_AGENT__MODEL_TIMEOUT_S": "3",
    "ROLLGATE_AGENT__EPISODE_TIMEOUT_S": "30",
    "ROLLGATE_AGENT__MAX_TURNS": "16",
}


class FaultCluster:
    def __init__(self, log_dir: Path, *, agent_concurrency: int = 8, settings: dict[str, str] | None = None):
        self.token = "faults-" + uuid.uuid4().hex[:8]
        self.log_dir = log_dir
        self.redis = RedisProcess(free_port())
        ports: dict[tuple[str, int], int] = {}
        specs = loopback_topology(
            ["math"],
            redis_url=self.redis.url,
            api_key=self.token,
            agent_replicas=2,
            env_replicas=2,
            model_backend="scripted",
            agent_concurrency=agent_concurrency,
            port_of=lambda name, i: ports.setdefault((name, i), free_port()),
        )
        self.procs: dict[str, list[ServerProcess]] = {
            s.name: [
                ServerProcess(
                    rollgate_cmd(*s.command(i)),
                    s.replica_ports[i],
                    name=f"{s.name}-{i}",
                    env={**s.env, **(SETTINGS if settings is None else settings)},
                    log_path=log_dir / f"{s.name}-{i}.log",
                )
                for i in range(s.replicas)
            ]
            for s in specs
        }
        self.stopped: set[int] = set()  # pids held by SIGSTOP

    @property
    def gateway_url(self) -> str:
        return self.procs["gateway"][0].url

    def proc(self, name: str, replica: int = 0) -> ServerProcess:
        return self.procs[name][replica]

    def all_procs(self) -> list[ServerProcess]:
        return [p for group in self.procs.values() for p in group]

    def start(self) -> FaultCluster:
        self.redis.start()
        self._start(self.all_procs())
        return self

    def _start(self, procs: list[ServerProcess]) -> None:
        # No part calls another while starting, so they start at once (imports dominate).
        with ThreadPoolExecutor(max_workers=max(1, len(procs))) as pool:
            for fut in [pool.submit(p.start, START_TIMEOUT_S) for p in procs]:
                fut.result()

    def hang(self, proc: ServerProcess) -> None:
        """SIGSTOP: the process keeps its sockets (connections are accepted) but answers nothing."""
        os.killpg(proc.pid, signal.SIGSTOP)
        self.stopped.add(proc.pid)

    def resume(self, proc: ServerProcess) -> None:
        os.killpg(proc.pid, signal.SIGCONT)
        self.stopped.discard(proc.pid)

    def heal(self) -> None:
        """Back to the full shape after a case: resume what hangs, restart what died."""
        for p in self.all_procs():
            if p.alive() and p.pid in self.stopped:
                self.resume(p)
        if not self.redis.alive():
            self.redis.start()
        self._start([p for p in self.all_procs() if not p.alive()])

    def close(self) -> None:
        for p in self.all_procs():
            if p.alive() and p.pid in self.stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGCONT)  # a stopped process cannot obey SIGTERM
            p.kill(signal.SIGTERM)
        self.redis.close()  # its data folder too
