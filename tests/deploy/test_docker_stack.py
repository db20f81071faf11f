"""The docker tier (`pytest -m docker`, not in the default run): the image built from
docker/Dockerfile, compose.yaml brought up as a new user would (with the host-network override
generated from the topology: all traffic on 127.0.0.1), a job collected through the gateway while an
agent and a resources container are killed, and the sandbox security suite's network and filesystem
cases against the deployed sandbox service. Everything the tier creates is removed at the end but
the images (cached for the next run). Figures go to test-artifacts/docker-tier.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.deploy.dockerenv import Engine, Stack, build_images, run
from tests.deploy.manifests import ROOT
from tests.sandbox import cases

# Building the image and bringing the stack up take minutes: far past the default 300 s per test.
pytestmark = [pytest.mark.docker, pytest.mark.timeout(2400)]

IMAGE = "rollgate:dockertier"
FIGURES: dict = {}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    engine = Engine(tmp_path_factory.mktemp("dockerd") / "dockerd.log")
    yield engine
    engine.stop()  # only if this tier started it


@pytest.fixture(scope="module")
def image(engine):
    FIGURES["image"] = build_images(IMAGE)
    return IMAGE


@pytest.fixture(scope="module")
def stack(image, tmp_path_factory):
    stack = Stack(tmp_path_factory.mktemp("stack"), image)
    try:
        t0 = time.monotonic()
        stop = threading.Event()
        watcher = threading.Thread(target=stack.watch_health, args=(stop,), daemon=True)
        watcher.start()
        try:
            stack.compose("up", "-d", "--no-build", timeout=900)
            stack.wait_healthy(stack.services, timeout_s=600)
        finally:
            stop.set()
            watcher.join(30)
        FIGURES["stack_up_s"] = round(time.monotonic() - t0, 1)
        FIGURES["time_to_healthy_s"] = {s: round(stack.time_to_healthy(s), 1) for s in stack.services}
        yield stack
    finally:
        stack.down()
        out = ROOT / "test-artifacts"
        out.mkdir(exist_ok=True)
        (out / "docker-tier.json").write_text(json.dumps(FIGURES, indent=2) + "\n")


def test_every_container_of_the_stack_is_on_the_host_network_and_healthy(stack):
    # The stack's containers, not the daemon: a default dockerd has a `bridge` network of its own,
    # which is fine as long as nothing of the stack rides it (172.16.0.0/12)
    networks = stack.networks()
    assert set(stack.services) <= set(networks), networks
    assert {service: n for service, n in networks.items() if n != ("host", ["host"])} == {}
    assert set(stack.health().values()) == {"healthy"}


def test_every_role_runs_as_the_image_user_except_the_sandbox(stack):
    for service in stack.services:
        uid = run(["docker", "exec", stack.containers()[service], "id", "-u"]).stdout.strip()
        expected = "0" if service in ("sandbox", "redis") else "10001"
        assert uid == expected, service
    caps = stack.inspect("sandbox")["HostConfig"]
    assert caps["CapDrop"] == ["ALL"] and "SYS_ADMIN" in caps["CapAdd"]
    assert not any("docker.sock" in m for s in stack.services for m in stack.inspect(s)["HostConfig"]["Binds"] or [])


def _serve(image: str, name: str, args: list[str], env: dict[str, str]) -> str:
    flags = [f"--env={k}={v}" for k, v in env.items()]
    return run(
        ["docker", "run", "-d", "--name", name, "--network", "host", *flags, image, "serve", *args]
    ).stdout.strip()


def test_role_all_turns_healthy_as_the_image_user(stack, image):
    """The image's default command (every part in one process), its code environment sending
    model code to the stack's sandbox service."""
    port = free_port()
    name = f"{stack.name}-all"
    env = {
        "ROLLGATE_SANDBOX__PROVIDER": "remote",
        "ROLLGATE_SANDBOX__URL": stack.url("sandbox"),
        "ROLLGATE_SANDBOX__TOKEN": stack.secrets["ROLLGATE_SANDBOX_TOKEN"],
    }
    cid = _serve(image, name, ["--role", "all", "--host", "127.0.0.1", "--port", str(port)], env)
    try:
        t0 = time.monotonic()
        while run(["docker", "inspect", cid, "--format", "{{.State.Health.Status}}"]).stdout.strip() != "healthy":
            assert time.monotonic() - t0 < 240, run(["docker", "logs", cid], check=False).stderr[-3000:]
            time.sleep(1)
        FIGURES.setdefault("time_to_healthy_s", {})["all"] = round(time.monotonic() - t0, 1)
        assert run(["docker", "exec", cid, "id", "-u"]).stdout.strip() == "10001"
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    finally:
        run(["docker", "rm", "-f", "-v", cid], check=False)


def test_code_environment_refuses_to_run_unisolated_in_a_plain_container(image):
    """Issue 15's second defect, for real: uid 10001 under Docker's default seccomp profile cannot
    make namespaces, so the code environment on the local provider must not start."""
    argv = ["docker", "run", "--rm", "--network", "host", image, "serve", "--role", "resources", "--env", "code"]
    done = run([*argv, "--host", "127.0.0.1", "--port", str(free_port())], check=False, timeout=180)
    assert done.returncode != 0
    assert "sandbox.allow_unisolated" in done.stderr and "cannot isolate" in done.stderr, done.stderr[-2000:]


def _records(out: Path) -> list[dict]:
    from rollgate.client.collector import failures_path

    lines = []
    for path in (out, failures_path(out)):
        if path.exists():
            lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines


def test_a_job_survives_killed_agent_and_resources_containers(stack, tmp_path):
    base = [json.loads(line) for line in (ROOT / "examples" / "math.jsonl").read_text().splitlines() if line]
    n = 60
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({**base[i % len(base)], "task_id": f"fault-{i:03d}"}) + "\n" for i in range(n)))
    out = tmp_path / "out.jsonl"
    argv = [sys.executable, "-m", "rollgate.cli", "collect", "--gateway", stack.url("gateway"), "--tasks", str(tasks)]
    env = {**os.environ, "ROLLGATE_API_KEY": stack.secrets["ROLLGATE_API_KEY"]}
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [*argv, "--out", str(out), "--no-progress"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        while len(_records(out)) < 5:  # mid-job: some records are in, most are not
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            assert time.monotonic() - t0 < 300, "no record arrived"
            time.sleep(0.2)
        killed_at = len(_records(out))
        containers = stack.containers()
        run(["docker", "kill", containers["agent-2"], containers["resources-math"]])
        time.sleep(3)
        # an orchestrator restarts a dead environment; the killed agent stays dead (its tasks move on)
        run(["docker", "start", containers["resources-math"]])
        output = proc.communicate(timeout=600)[0].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output[-3000:]
    records = _records(out)
    ids = [r["task"]["task_id"] for r in records]
    outcomes: dict[str, int] = {}
    for r in records:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    FIGURES["fault"] = {
        "tasks": n,
        "records": len(records),
        "duplicates": len(ids) - len(set(ids)),
        "records_before_kill": killed_at,
        "outcomes": outcomes,
        "job_s": round(time.monotonic() - t0, 1),
    }
    assert sorted(ids) == sorted(f"fault-{i:03d}" for i in range(n)), FIGURES["fault"]
    for r in records:  # an infrastructure failure is never a reward of 0
        assert (r["outcome"] == "completed") == (r.get("reward") is not None) or r["outcome"] == "truncated", r


def test_every_container_is_healthy_again_after_the_faults(stack):
    run(["docker", "start", stack.containers()["agent-2"]])
    stack.wait_healthy(stack.services, timeout_s=300)


async def test_deployed_sandbox_passes_the_network_and_filesystem_cases(stack):
    from rollgate.sandbox.remote import RemoteProvider

    provider = RemoteProvider(stack.url("sandbox"), stack.secrets["ROLLGATE_SANDBOX_TOKEN"])
    try:
        # what model code would most like to reach: Redis, the gateway, the model, the sandbox API itself
        ports = [stack.ports[s] for s in ("redis", "gateway", "model", "sandbox")]
        await cases.no_network_to(provider, ports)
        await cases.no_network_even_to_loopback(provider)
        await cases.sessions_cannot_read_each_other(provider)
        await cases.service_secrets_stay_hidden(provider, stack.secrets["ROLLGATE_SANDBOX_TOKEN"], [])
        # the image's Rollgate (its own virtual environment), home and state are not in the run's root
        await cases.escapes_are_refused(provider, ["/opt/rollgate", "/home/rollgate", "/var/lib/rollgate"])
        caps = provider.capabilities()
        assert caps["network_isolated"] is True and caps["private_root"] is True and caps["seccomp"] is True
    finally:
        await provider.close()


async def test_the_sandbox_service_refuses_a_wrong_token(stack):
    from rollgate.sandbox import SandboxError
    from rollgate.sandbox.remote import RemoteProvider

    provider = RemoteProvider(stack.url("sandbox"), "not-the-token")
    with pytest.raises(SandboxError, match="401"):
        await provider.create()
    await provider.close()


def test_down_removes_every_container_volume_and_network(stack):
    stack.down()
    assert stack.leftovers() == {"container": [], "volume": [], "network": []}
