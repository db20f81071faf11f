"""The Docker provider: one long-lived, locked-down container per sandbox, commands via `docker exec`.

The container has no network, a read-only root, tmpfs /tmp and /work, no capabilities,
no_new_privs, a non-root user, a seccomp profile (Docker's default allowlist, or with
`seccomp_profile="rollgate"` the local sandbox's refusals of seccomp.py, ptrace included, or a
profile file of yours), and memory / pids / CPU / ulimit caps. The image is a plain Python image,
so nothing of Rollgate or of the tasks is inside. `runtime="runsc"` (gVisor) adds a user-space
kernel where installed. A container takes ~0.3-1 s to start, so put a WarmPool
in front of this provider (`pool_size` in make_provider).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import tempfile
from typing import Any

from rollgate.core.metrics import Metrics
from rollgate.sandbox.base import SandboxLimits
from rollgate.sandbox.engine import WORKDIR, CliSandbox, run_engine
from rollgate.sandbox.seccomp import docker_profile


def rollgate_profile_file() -> str:
    """seccomp.py's refusals as a Docker profile file (content-addressed, written once)."""
    text = json.dumps(docker_profile(), indent=1, sort_keys=True)
    path = os.path.join(
        tempfile.gettempdir(), f"rollgate-seccomp-{hashlib.sha256(text.encode()).hexdigest()[:12]}.json"
    )
    if not os.path.exists(path):
        tmp = f"{path}.{secrets.token_hex(4)}"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return path


class DockerProvider:
    name = "docker"
    sandbox_workdir = WORKDIR  # the work dir as the sandboxed program sees it

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
        seccomp_profile: str | None = None,
        metrics: Metrics | None = None,
    ):
        self.limits = SandboxLimits.model_validate(limits or {})
        # None: Docker's default profile; "rollgate": seccomp.py's list; else a profile file's path
        self.seccomp_profile = rollgate_profile_file() if seccomp_profile == "rollgate" else seccomp_profile
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
            "private_root": True,  # the image's own root, read-only
            "seccomp": self.seccomp_profile or "docker default",
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
        if self.seccomp_profile:
            argv += ["--security-opt", f"seccomp={self.seccomp_profile}"]
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
