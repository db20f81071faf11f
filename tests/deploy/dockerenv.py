"""The docker tier's machinery: a Docker engine (started here only if none runs, and then stopped),
the local base image (scripts/docker-test-base.sh), the image built from docker/Dockerfile, and
compose.yaml brought up with the host-network override that scripts/gen_deploy.py generates from
the topology: every container on 127.0.0.1 with a port of its own, no Docker network created."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import free_port
from tests.deploy.manifests import COMPOSE, ROOT

SBIN = "/usr/local/sbin:/usr/sbin:/sbin"
BASE_TAG = "rollgate-test-base:bookworm"
PROJECT_LABEL = "com.docker.compose.project"


def _gen_deploy():
    sys.path.insert(0, str(ROOT / "scripts"))
    import gen_deploy

    return gen_deploy


def run(argv: list[str], *, timeout: float = 600, check: bool = True, **kw: Any) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and done.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv[:6])} ... failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done


def engine_up() -> bool:
    return shutil.which("docker") is not None and run(["docker", "info"], check=False, timeout=30).returncode == 0


class Engine:
    """A running dockerd: the machine's, or one started here (no bridge, no iptables: containers get
    host networking or none) and stopped by `stop()`."""

    def __init__(self, log_path: Path):
        self.proc: subprocess.Popen | None = None
        if engine_up():
            return
        exe = shutil.which("dockerd", path=os.environ.get("PATH", "") + ":" + SBIN)
        if exe is None or shutil.which("docker") is None:
            pytest.skip("no Docker engine (Debian: apt-get install docker.io docker-compose debootstrap)")
        if os.geteuid() != 0:
            pytest.skip("dockerd is not running and only root can start it")
        args = ["--bridge=none", "--iptables=false", "--ip-masq=false", "--ip-forward=false"]
        self.log = open(log_path, "w")  # noqa: SIM115 - lives as long as the engine
        self.proc = subprocess.Popen([exe, *args], stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while not engine_up():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"dockerd did not start; see {log_path}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


def build_images(tag: str) -> dict[str, float]:
    """The local base (cached) and the image from docker/Dockerfile; returns timings and size."""
    t0 = time.monotonic()
    if run(["docker", "image", "inspect", BASE_TAG], check=False).returncode != 0:
        if shutil.which("debootstrap", path=os.environ.get("PATH", "") + ":" + SBIN) is None:
            pytest.skip("debootstrap is missing (apt-get install debootstrap) to build the local base image")
        run(["bash", str(ROOT / "scripts" / "docker-test-base.sh"), BASE_TAG], timeout=1800)
    t1 = time.monotonic()
    # The classic builder: BuildKit would fetch the dockerfile frontend image from Docker Hub.
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    argv = ["docker", "build", "--force-rm", "--network", "host", "--build-arg", f"PYTHON_IMAGE={BASE_TAG}"]
    run([*argv, "-f", str(ROOT / "docker" / "Dockerfile"), "-t", tag, str(ROOT)], timeout=1800, env=env)
    size = int(run(["docker", "image", "inspect", tag, "--format", "{{.Size}}"]).stdout.strip())
    return {"base_s": t1 - t0, "build_s": time.monotonic() - t1, "size_bytes": size}


def compose_cmd() -> list[str]:
    if run(["docker", "compose", "version"], check=False).returncode == 0:
        return ["docker", "compose"]
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("neither `docker compose` nor docker-compose is installed")
    return [exe]


@dataclass
class Stack:
    """compose.yaml + the generated host override, as project `name`, in `workdir`."""

    workdir: Path
    image: str
    name: str = field(default_factory=lambda: "rgtest" + secrets.token_hex(4))
    secrets: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    healthy_at: dict[str, float] = field(default_factory=dict)  # service -> first seen healthy (epoch s)

    def __post_init__(self) -> None:
        self.secrets = {
            "ROLLGATE_API_KEY": secrets.token_hex(16),
            "ROLLGATE_REDIS_PASSWORD": secrets.token_hex(16),
            "ROLLGATE_SANDBOX_TOKEN": secrets.token_hex(16),
        }
        self.env_file = self.workdir / ".env"
        self.env_file.write_text(
            "".join(f"{k}={v}\n" for k, v in self.secrets.items())
            + f"ROLLGATE_IMAGE={self.image}\nREDIS_IMAGE={BASE_TAG}\n"
        )
        gen = _gen_deploy()
        stale = gen.stale(gen.rendered())
        assert not stale, f"stale deployment files {stale}: run python scripts/gen_deploy.py first"
        self.ports["redis"] = free_port()

        def port_of(service: str, replica: int) -> int:
            key = service if replica == 0 else f"{service}-{replica + 1}"
            return self.ports.setdefault(key, free_port())

        # Fast reclaim of a dead worker's tasks, so the fault test takes seconds, not a minute.
        extra = {"ROLLGATE_GATEWAY__VISIBILITY_TIMEOUT_S": "5"}
        override = gen.host_override(port_of, redis_port=self.ports["redis"], extra_env=extra)
        (self.workdir / "compose.host.yaml").write_text(gen.dump([override]))
        merged = gen.with_override(yaml.safe_load(COMPOSE.read_text()), override)
        self.file = self.workdir / "compose.merged.yaml"
        self.file.write_text(gen.dump([merged]))
        self.services = [n for n, s in merged["services"].items() if not s.get("profiles")]

    def compose(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        argv = [*compose_cmd(), "-p", self.name, "--project-directory", str(ROOT), "--env-file", str(self.env_file)]
        return run([*argv, "-f", str(self.file), *args], timeout=timeout, check=check)

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.ports[service]}"

    def containers(self) -> dict[str, str]:
        """service -> container id (every state)."""
        out = run(["docker", "ps", "-a", "--filter", f"label={PROJECT_LABEL}={self.name}", "--format", "{{.ID}}"])
        ids = out.stdout.split()
        if not ids:
            return {}
        info = json.loads(run(["docker", "inspect", *ids]).stdout)
        return {c["Config"]["Labels"]["com.docker.compose.service"]: c["Id"] for c in info}

    def inspect(self, service: str) -> dict[str, Any]:
        return json.loads(run(["docker", "inspect", self.containers()[service]]).stdout)[0]

    def networks(self) -> dict[str, tuple[str, list[str]]]:
        """service -> (its NetworkMode, the networks it is attached to), for every container of
        this project; a host-network container is ("host", ["host"])."""
        out = {}
        for service, cid in self.containers().items():
            info = json.loads(run(["docker", "inspect", cid]).stdout)[0]
            attached = sorted((info.get("NetworkSettings") or {}).get("Networks") or {})
            out[service] = (info["HostConfig"]["NetworkMode"], attached)
        return out

    def health(self) -> dict[str, str]:
        out = {}
        for service, cid in self.containers().items():
            state = json.loads(run(["docker", "inspect", cid]).stdout)[0]["State"]
            out[service] = state.get("Health", {}).get("Status") if state["Running"] else state["Status"]
        return out

    def wait_healthy(self, services: list[str], timeout_s: float = 300) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            health = self.health()
            for s, status in health.items():
                if status == "healthy":
                    self.healthy_at.setdefault(s, time.time())
            if all(health.get(s) == "healthy" for s in services):
                return
            if time.monotonic() > deadline:
                logs = self.compose("logs", "--tail", "30", check=False).stdout[-6000:]
                raise AssertionError(f"not healthy after {timeout_s}s: {health}\n{logs}")
            time.sleep(1)

    def watch_health(self, stop: threading.Event) -> None:
        """Record when each container is first healthy, while `compose up` runs (it blocks until the
        dependencies of each service are healthy, so polling only after it returns is too late)."""
        while not stop.is_set():
            with contextlib.suppress(AssertionError, KeyError, IndexError, subprocess.TimeoutExpired):
                for s, status in self.health().items():
                    if status == "healthy":
                        self.healthy_at.setdefault(s, time.time())
            stop.wait(0.5)

    def time_to_healthy(self, service: str) -> float:
        """Seconds from the container's start until wait_healthy first saw it healthy (polled about
        once a second; Docker keeps only the last five health results, too few to look back)."""
        started = _ts(self.inspect(service)["State"]["StartedAt"])
        return self.healthy_at[service] - started

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, volumes and networks of this project still present."""
        flt = ["--filter", f"label={PROJECT_LABEL}={self.name}"]
        return {
            kind: run(["docker", kind, "ls", *(["-a"] if kind == "container" else []), "-q", *flt]).stdout.split()
            for kind in ("container", "volume", "network")
        }

    def down(self) -> None:
        self.compose("down", "-v", "--remove-orphans", "--timeout", "10", check=False)


def _ts(text: str) -> float:
    # Docker's RFC 3339 with nanoseconds: keep microseconds for fromisoformat
    head, _, frac = text.rstrip("Z").partition(".")
    frac = (frac.split("+")[0].split("-")[0] + "000000")[:6]
    return datetime.fromisoformat(f"{head}.{frac}+00:00").timestamp()
