"""The Docker and Kubernetes providers. No container engine or cluster runs on development and CI
machines, so these tests check the commands and manifests the providers generate (manifests are
validated offline against the Kubernetes schema), plus the error a missing engine gives."""

from __future__ import annotations

import errno
import json

import kubernetes_validate
import pytest

from rollgate.sandbox import SandboxError, make_provider
from rollgate.sandbox.docker import DockerProvider
from rollgate.sandbox.engine import CliSandbox, container_path
from rollgate.sandbox.kubernetes import SANDBOX_LABEL, KubernetesProvider
from rollgate.sandbox.pool import WarmPool

LIMITS = {
    "memory_bytes": 256 * 2**20,
    "max_procs": 32,
    "cpu_s": 5,
    "max_open_files": 128,
    "max_file_bytes": 2**20,
    "max_workdir_bytes": 8 * 2**20,
    "tmpfs_bytes": 4 * 2**20,
}


def _opt(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_docker_container_has_no_network_no_privileges_and_caps():
    argv = DockerProvider(LIMITS, image="python:3.12-slim", runtime="runsc").run_argv("rollgate-sbx-1")
    assert argv[:2] == ["docker", "run"] and argv[-3:] == ["python:3.12-slim", "sleep", "infinity"]
    assert _opt(argv, "--network") == ["none"]
    assert "--read-only" in argv and "--rm" in argv
    assert _opt(argv, "--cap-drop") == ["ALL"] and _opt(argv, "--security-opt") == ["no-new-privileges"]
    assert _opt(argv, "--user") == ["65534:65534"]
    assert _opt(argv, "--memory") == [f"{256 * 2**20}b"] and _opt(argv, "--memory-swap") == [f"{256 * 2**20}b"]
    assert _opt(argv, "--pids-limit") == ["32"]
    assert set(_opt(argv, "--ulimit")) >= {"nofile=128:128", "fsize=1048576:1048576", "cpu=5:6", "core=0"}
    assert _opt(argv, "--runtime") == ["runsc"]
    tmpfs = _opt(argv, "--tmpfs")
    assert any(t.startswith("/work:") and "size=8388608" in t and "uid=65534" in t for t in tmpfs)
    assert any(t.startswith("/tmp:") and "size=4194304" in t for t in tmpfs)


def test_docker_container_can_carry_the_local_sandboxs_seccomp_refusals():
    argv = DockerProvider(LIMITS, seccomp_profile="rollgate").run_argv("rollgate-sbx-1")
    (no_privs, seccomp) = _opt(argv, "--security-opt")
    assert no_privs == "no-new-privileges" and seccomp.startswith("seccomp=")
    with open(seccomp.removeprefix("seccomp=")) as f:
        profile = json.load(f)
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    denied = {
        n
        for rule in profile["syscalls"]
        if rule["errnoRet"] == errno.EPERM and "args" not in rule
        for n in rule["names"]
    }
    assert {"unshare", "setns", "mount", "ptrace", "bpf", "keyctl", "init_module"} <= denied
    clone_flags = {r["args"][0]["value"] for r in profile["syscalls"] if r["names"] == ["clone"]}
    assert 0x10000000 in clone_flags  # CLONE_NEWUSER


def test_remote_exec_is_bounded_inside_and_outside_the_container():
    sb = CliSandbox(
        "c1", DockerProvider().exec_prefix("c1"), ["docker", "rm", "--force", "c1"], DockerProvider().limits
    )
    argv = sb.exec_argv(["python3", "x.py"], 7.5)
    assert argv[:4] == ["docker", "exec", "--interactive", "--workdir"]
    assert argv[5:] == ["c1", "timeout", "-s", "KILL", "7.5s", "python3", "x.py"]
    assert container_path("a/b.py") == "/work/a/b.py"
    with pytest.raises(Exception, match="must be relative"):
        container_path("../etc/passwd")


def test_kubernetes_pod_is_locked_down_and_valid():
    provider = KubernetesProvider(LIMITS, namespace="sbx", runtime_class="gvisor")
    pod = provider.pod_spec("rollgate-sbx-1")
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
    spec = pod["spec"]
    (container,) = spec["containers"]
    sc = container["securityContext"]
    assert spec["securityContext"]["runAsNonRoot"] and sc["runAsNonRoot"] and sc["runAsUser"] != 0
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["privileged"] is False
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert spec["hostNetwork"] is False and spec["runtimeClassName"] == "gvisor"
    assert container["resources"]["limits"]["memory"] == str(256 * 2**20)
    assert {v["name"]: v["emptyDir"]["sizeLimit"] for v in spec["volumes"]} == {
        "work": str(8 * 2**20),
        "tmp": str(4 * 2**20),
    }
    assert pod["metadata"]["labels"][SANDBOX_LABEL] == "true"


def test_kubernetes_network_policy_denies_all_traffic_of_sandbox_pods():
    provider = KubernetesProvider(namespace="sbx")
    policy = provider.network_policy()
    kubernetes_validate.validate(policy, kubernetes_validate.latest_version(), strict=True)
    spec = policy["spec"]
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"}
    assert spec["egress"] == [] and spec["ingress"] == []
    pod_labels = provider.pod_spec("x")["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in spec["podSelector"]["matchLabels"].items())
    assert provider.exec_prefix("p")[-4:] == ["p", "-c", "sandbox", "--"]


@pytest.mark.parametrize("kind,binary", [("docker", "docker"), ("kubernetes", "kubectl")])
async def test_missing_engine_is_a_clear_sandbox_error(kind, binary):
    opt = {"docker": "rollgate-no-such-docker"} if kind == "docker" else {"kubectl": "rollgate-no-such-kubectl"}
    provider = make_provider(kind, **opt)
    with pytest.raises(SandboxError, match="not found on PATH"):
        await provider.create()


def test_pool_option_wraps_any_provider():
    pool = make_provider("docker", pool_size=3)
    assert isinstance(pool, WarmPool) and pool.size == 3 and pool.capabilities()["warm_pool"] == 3
