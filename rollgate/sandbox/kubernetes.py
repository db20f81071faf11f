"""The Kubernetes provider: one Pod per sandbox, commands via `kubectl exec`.

Each Pod runs as a non-root user with no capabilities, no privilege escalation, a read-only root,
memory-backed /work and /tmp with size limits, no service-account token and no service links, and
CPU / memory / ephemeral-storage limits. One NetworkPolicy per namespace (created on first use)
selects every sandbox Pod and allows no ingress and no egress (needs a CNI that enforces
NetworkPolicy, e.g. Calico or Cilium). Process count limits are the kubelet's `podPidsLimit`.
A Pod takes seconds to start: use a WarmPool (`pool_size` in make_provider).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

from rollgate.core.metrics import Metrics
from rollgate.sandbox.base import SandboxLimits
from rollgate.sandbox.engine import WORKDIR, CliSandbox, run_engine

SANDBOX_LABEL = "rollgate.io/sandbox"
POLICY_NAME = "rollgate-sandbox-deny-all"


class KubernetesProvider:
    name = "kubernetes"
    sandbox_workdir = WORKDIR  # the work dir as the sandboxed program sees it

    def __init__(
        self,
        limits: SandboxLimits | dict[str, Any] | None = None,
        *,
        namespace: str = "rollgate-sandboxes",
        image: str = "python:3.12-slim",
        kubectl: str = "kubectl",
        runtime_class: str | None = None,
        run_as_user: int = 65534,
        cpu: str = "1",
        max_lifetime_s: int = 3600,
        ready_timeout_s: float = 120.0,
        python: str = "python3",
        metrics: Metrics | None = None,
    ):
        self.limits = SandboxLimits.model_validate(limits or {})
        self.namespace, self.image, self.kubectl = namespace, image, kubectl
        self.runtime_class, self.run_as_user, self.cpu = runtime_class, run_as_user, cpu
        self.max_lifetime_s, self.ready_timeout_s = max_lifetime_s, ready_timeout_s
        self.python = python
        self.metrics = metrics
        self._policy_lock = asyncio.Lock()
        self._policy_applied = False

    def capabilities(self) -> dict[str, Any]:
        return {
            "provider": self.name,
            "network_isolated": "via NetworkPolicy",
            "pid_namespace": True,
            "private_tmp": True,
            "dedicated_uid": True,
            "private_root": True,  # the image's own root, read-only
            "seccomp": "RuntimeDefault",
            "namespace": self.namespace,
            "image": self.image,
        }

    def network_policy(self) -> dict[str, Any]:
        """Deny all ingress and egress of every sandbox Pod (no rules listed = nothing allowed)."""
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": POLICY_NAME, "namespace": self.namespace},
            "spec": {
                "podSelector": {"matchLabels": {SANDBOX_LABEL: "true"}},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [],
                "egress": [],
            },
        }

    def pod_spec(self, name: str) -> dict[str, Any]:
        lim = self.limits
        mem = str(lim.memory_bytes)
        uid = self.run_as_user
        container = {
            "name": "sandbox",
            "image": self.image,
            "command": ["sleep", "infinity"],
            "workingDir": WORKDIR,
            "env": [{"name": "HOME", "value": WORKDIR}, {"name": "LANG", "value": "C.UTF-8"}],
            "resources": {
                "requests": {"cpu": "100m", "memory": "64Mi"},
                "limits": {
                    "cpu": self.cpu,
                    "memory": mem,
                    "ephemeral-storage": str(lim.max_workdir_bytes + lim.tmpfs_bytes),
                },
            },
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": uid,
                "runAsGroup": uid,
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "privileged": False,
                "capabilities": {"drop": ["ALL"]},
            },
            "volumeMounts": [{"name": "work", "mountPath": WORKDIR}, {"name": "tmp", "mountPath": "/tmp"}],
        }
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "hostNetwork": False,
            "hostPID": False,
            "hostIPC": False,
            "terminationGracePeriodSeconds": 0,
            # A sandbox orphaned by a crashed service still goes away.
            "activeDeadlineSeconds": self.max_lifetime_s,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": uid,
                "runAsGroup": uid,
                "fsGroup": uid,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [container],
            "volumes": [
                {"name": "work", "emptyDir": {"medium": "Memory", "sizeLimit": str(lim.max_workdir_bytes)}},
                {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": str(lim.tmpfs_bytes)}},
            ],
        }
        if self.runtime_class:
            spec["runtimeClassName"] = self.runtime_class
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {SANDBOX_LABEL: "true", "app.kubernetes.io/name": "rollgate-sandbox"},
            },
            "spec": spec,
        }

    def apply_argv(self) -> list[str]:
        return [self.kubectl, "apply", "--namespace", self.namespace, "-f", "-"]

    def exec_prefix(self, name: str) -> list[str]:
        return [self.kubectl, "exec", "--stdin", "--namespace", self.namespace, name, "-c", "sandbox", "--"]

    async def _ensure_policy(self) -> None:
        async with self._policy_lock:
            if not self._policy_applied:
                await run_engine(
                    self.apply_argv(),
                    stdin=json.dumps(self.network_policy()).encode(),
                    what="kubectl apply NetworkPolicy",
                )
                self._policy_applied = True

    async def create(self) -> CliSandbox:
        # Never start a Pod before its egress is denied.
        await self._ensure_policy()
        name = f"rollgate-sbx-{secrets.token_hex(8)}"
        await run_engine(self.apply_argv(), stdin=json.dumps(self.pod_spec(name)).encode(), what="kubectl apply Pod")
        delete = [
            self.kubectl,
            "delete",
            "pod",
            name,
            "--namespace",
            self.namespace,
            "--wait=false",
            "--grace-period=0",
            "--ignore-not-found",
        ]
        try:
            await run_engine(
                [
                    self.kubectl,
                    "wait",
                    "--namespace",
                    self.namespace,
                    "--for=condition=Ready",
                    f"pod/{name}",
                    f"--timeout={self.ready_timeout_s:g}s",
                ],
                timeout_s=self.ready_timeout_s + 15,
                what="kubectl wait Ready",
            )
        except BaseException:
            await run_engine(delete, what="kubectl delete Pod")
            raise
        return CliSandbox(name, self.exec_prefix(name), delete, self.limits, metrics=self.metrics, python=self.python)

    async def close(self) -> None:
        return None
