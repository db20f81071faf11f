"""The Docker provider: one long-lived, locked-down container per sandbox, commands via `docker exec`.

The container has no network, a read-only root, tmpfs /tmp and /work, no capabilities,
no_new_privs, a non-root user, and memory / pids / CPU / ulimit caps. `runtime="runsc"` (gVisor)
adds a user-space kernel where installed. A container takes ~0.3-1 s to start, so put a WarmPool
in front of this provider (`pool_size` in make_provider).
"""

from __future__ import annotations

import secrets
from typing import Any

from rollgate.core.metrics import Metrics
from rollgate.sandbox.base import SandboxLimits
from rollgate.sandbox.engine import WORKDIR, CliSandbox, run_engine


class DockerProvider:
    name = "docker"

    def __init__(
        self,
        limits: SandboxLimits | dict[str, Any] | None = None,
        *,
        image: str = "python:3.12-slim",
        docker: str = "docker",
        user: str = "65534:65534",
        runtime: str | None = None,
        cpus: float = 1.0,
        python: str = "python3",
        metrics: Metrics | None = None,
    ):
        self.limits = SandboxLimits.model_validate(limits or {})
        self.image, self.docker, self.user, self.runtime, self.cpus = image, docker, user, runtime, cpus
        self.python = python
        self.metrics = metrics

    def capabilities(self) -> dict[str, Any]:
        return {
            "provider": self.name,
            "network_isolated": True,
            "pid_namespace": True,
            "private_tmp": True,
            "dedicated_uid": True,
            "image": self.image,
            "runtime": self.runtime or "default",
        }

    def run_argv(self, name: str) -> list[str]:
        """`docker run` of one sandbox container (kept alive by `sleep infinity`; work runs via exec)."""
        lim = self.limits
        uid, _, gid = self.user.partition(":")
        argv = [
            self.docker,
            "run",
            "--detach",
            "--rm",
            "--name",
            name,
            "--label",
            "rollgate.sandbox=1",
            "--network",
            "none",
            "--read-only",
            "--memory",
            f"{lim.memory_bytes}b",
            "--memory-swap",
            f"{lim.memory_bytes}b",
            "--pids-limit",
            str(lim.max_procs),
            "--cpus",
            f"{self.cpus:g}",
            "--user",
            self.user,
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--ulimit",
            f"nofile={lim.max_open_files}:{lim.max_open_files}",
            "--ulimit",
            f"fsize={lim.max_file_bytes}:{lim.max_file_bytes}",
            "--ulimit",
            f"cpu={lim.cpu_s}:{lim.cpu_s + 1}",
            "--ulimit",
            "core=0",
            "--tmpfs",
            f"/tmp:rw,nosuid,nodev,size={lim.tmpfs_bytes}",
            "--tmpfs",
            f"{WORKDIR}:rw,exec,nosuid,nodev,size={lim.max_workdir_bytes},uid={uid},gid={gid or uid},mode=0700",
            "--workdir",
            WORKDIR,
            "--env",
            f"HOME={WORKDIR}",
            "--env",
            "LANG=C.UTF-8",
        ]
        if self.runtime:
            argv += ["--runtime", self.runtime]
        return [*argv, self.image, "sleep", "infinity"]

    def exec_prefix(self, name: str) -> list[str]:
        return [self.docker, "exec", "--interactive", "--workdir", WORKDIR, name]

    async def create(self) -> CliSandbox:
        name = f"rollgate-sbx-{secrets.token_hex(8)}"
        await run_engine(self.run_argv(name), what="docker run")
        return CliSandbox(
            name,
            self.exec_prefix(name),
            [self.docker, "rm", "--force", name],
            self.limits,
            metrics=self.metrics,
            python=self.python,
        )

    async def close(self) -> None:
        return None
