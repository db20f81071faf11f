"""k8s/base rendered from rollgate/core/topology.py (called by scripts/gen_deploy.py).

One Service + Deployment per topology service, the ConfigMap of wiring settings, Secrets (API key,
Redis password), Redis with a password, autoscalers, disruption budgets and the sandbox policy and
RBAC of the code environment's kubernetes sandbox provider. Overlays (k8s/overlays) stay hand-written.
"""

from __future__ import annotations

from typing import Any

from rollgate.core.topology import ServiceSpec

REDIS_URL = "redis://:$(REDIS_PASSWORD)@redis:6379/0"
WIRING_KEYS = ("ROLLGATE_MODEL_URL", "ROLLGATE_ENV_URLS", "ROLLGATE_ENVS")
# Secrets: the API key as a ROLLGATE_ setting; the Redis password under its own name (not a
# setting), expanded into ROLLGATE_REDIS_URL and the Redis server's arguments by Kubernetes.
SECRET_KEYS = ("ROLLGATE_API_KEY",)

RESOURCES = {
    "model": ({"cpu": "1", "memory": "2Gi"}, {"cpu": "4", "memory": "8Gi"}),
    "agent": ({"cpu": "500m", "memory": "512Mi"}, {"cpu": "2", "memory": "2Gi"}),
    "gateway": ({"cpu": "500m", "memory": "512Mi"}, {"cpu": "2", "memory": "2Gi"}),
    "resources": ({"cpu": "250m", "memory": "256Mi"}, {"cpu": "1", "memory": "1Gi"}),
}
HEADERS = {
    "model": "The model server. Base: the local backend on the tiny model baked into the image (CPU);\n"
    "overlays/gpu switches it to backend vllm in front of a vLLM Deployment.",
    "agent": "Agent workers: claim tasks from the Redis job queue and run episodes. On SIGTERM a worker\n"
    "gives unfinished claims back to the queue, so a short grace period loses nothing.",
    "gateway": "The front door (REST for trainers). Stateless: jobs and results live in Redis.\n"
    "Expose it with an Ingress or a LoadBalancer Service of your cluster.",
    "resources": "The {env} environment: stateless replicas sharing sessions through Redis.",
    "resources-family": "The {env} family: one service serves every member under /envs/<member>.",
    "resources-code": "The code environment runs model-written Python in sandboxes; with the kubernetes sandbox\n"
    'provider each sandbox is a Pod (labelled rollgate.io/sandbox "true") that sandbox.yaml cuts off\n'
    "from the network. The ServiceAccount may manage Pods of this namespace only.",
}


def labels(spec: ServiceSpec) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "rollgate",
        "app.kubernetes.io/component": spec.role,
        "app.kubernetes.io/instance": spec.name,
    }


def _probe(kind: str, failures: int) -> dict[str, Any]:
    probe: dict[str, Any] = {"httpGet": {"path": "/healthz", "port": "http"}}
    if kind == "startup":
        probe.update(periodSeconds=5, failureThreshold=failures)
    elif kind == "readiness":
        probe.update(periodSeconds=5, timeoutSeconds=3, failureThreshold=2)
    else:
        probe.update(periodSeconds=15, timeoutSeconds=5, failureThreshold=4)
    return probe


def redis_password_env() -> dict[str, Any]:
    return {"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "rollgate-redis", "key": "password"}}}


def container_env(spec: ServiceSpec) -> list[dict[str, Any]]:
    """What envFrom does not carry: the Redis URL (expanded from the password) and per-service settings."""
    env: list[dict[str, Any]] = [redis_password_env()]
    if spec.name == "resources-code":
        env.append({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}})
    for key, value in spec.env.items():
        if key in WIRING_KEYS or key in SECRET_KEYS:
            continue
        env.append({"name": key, "value": value})
    if spec.name == "resources-code":
        # Model-written code runs in sandbox Pods of this namespace (see sandbox.yaml), not in this pod.
        env.append({"name": "ROLLGATE_SANDBOX__OPTIONS", "value": '{"namespace": "$(POD_NAMESPACE)"}'})
    return env


def service_docs(spec: ServiceSpec, *, replicas: int | None = None) -> list[dict[str, Any]]:
    meta = {"name": spec.name, "labels": labels(spec)}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "selector": {"app.kubernetes.io/instance": spec.name},
            "ports": [{"name": "http", "port": spec.port, "targetPort": "http"}],
        },
    }
    env_from: list[dict[str, Any]] = []
    if any(k in spec.env for k in WIRING_KEYS):
        env_from.append({"configMapRef": {"name": "rollgate-wiring"}})
    env_from.append({"secretRef": {"name": "rollgate-secrets"}})
    requests, limits = RESOURCES[spec.role]
    mounts = [{"name": "tmp", "mountPath": "/tmp"}, {"name": "home", "mountPath": "/var/lib/rollgate"}]
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}, {"name": "home", "emptyDir": {}}]
    if spec.role == "model":
        mounts.append({"name": "cache", "mountPath": "/home/rollgate/.cache"})
        volumes.append({"name": "cache", "emptyDir": {}})
    container = {
        "name": "rollgate",
        "image": "rollgate",
        "args": spec.command(),
        "ports": [{"name": "http", "containerPort": spec.port}],
        "envFrom": env_from,
        "env": container_env(spec),
        "startupProbe": _probe("startup", 60 if spec.role == "model" else 30),
        "readinessProbe": _probe("readiness", 2),
        "livenessProbe": _probe("liveness", 4),
        "resources": {"requests": dict(requests), "limits": dict(limits)},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": mounts,
    }
    pod: dict[str, Any] = {}
    if spec.name == "resources-code":
        pod.update(serviceAccountName="rollgate-sandbox-manager", automountServiceAccountToken=True)
    else:
        pod["automountServiceAccountToken"] = False
    pod.update(
        terminationGracePeriodSeconds=60 if spec.role == "agent" else 30,
        securityContext={
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "runAsGroup": 10001,
            "fsGroup": 10001,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        containers=[container],
        volumes=volumes,
    )
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": replicas if replicas is not None else spec.replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/instance": spec.name}},
            "template": {
                "metadata": {
                    "labels": labels(spec),
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(spec.port),
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": pod,
            },
        },
    }
    return [service, deployment]


def header_of(spec: ServiceSpec) -> str:
    if spec.name == "resources-code":
        return HEADERS["resources-code"]
    if spec.role == "resources":
        key = "resources-family" if len(spec.serves) > 1 else "resources"
        return HEADERS[key].format(env=spec.args[spec.args.index("--env") + 1])
    return HEADERS[spec.role]


def config_docs(specs: list[ServiceSpec]) -> list[dict[str, Any]]:
    wiring = next(s for s in specs if s.role == "gateway").env
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "rollgate-wiring"},
            "data": {k: wiring[k] for k in WIRING_KEYS},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "rollgate-secrets"},
            "type": "Opaque",
            "stringData": {"ROLLGATE_API_KEY": "change-me"},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "rollgate-redis"},
            "type": "Opaque",
            "stringData": {"password": "change-me-too"},
        },
    ]


CONFIG_HEADER = (
    "Settings as ROLLGATE_* variables (rollgate/core/settings.py): where agents and the gateway find the\n"
    "model server and each environment's Service. Secrets: replace both placeholders before applying\n"
    "anywhere shared (kubectl create secret generic rollgate-secrets --from-literal=ROLLGATE_API_KEY=...;\n"
    "kubectl create secret generic rollgate-redis --from-literal=password=..., letters and digits), or use\n"
    "an external secret manager. Every Rollgate container builds ROLLGATE_REDIS_URL from the password."
)


def hpa_docs(specs: list[ServiceSpec]) -> list[dict[str, Any]]:
    out = []
    for s in specs:
        if s.role not in ("agent", "resources"):
            continue
        agent = s.role == "agent"
        out.append(
            {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": s.name},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": s.name},
                    "minReplicas": 2 if agent else 1,
                    "maxReplicas": 50 if agent else 20,
                    "metrics": [
                        {
                            "type": "Resource",
                            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}},
                        }
                    ],
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
                },
            }
        )
    return out


def pdb_docs(specs: list[ServiceSpec]) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": s.name},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app.kubernetes.io/instance": s.name}}},
        }
        for s in sorted(
            specs,
            key=lambda s: ("gateway", "agent", "model").index(s.role) if s.role in ("gateway", "agent", "model") else 3,
        )
        if s.role in ("gateway", "agent", "model", "resources")
    ]


def redis_docs() -> list[dict[str, Any]]:
    meta = {"name": "redis", "labels": {"app.kubernetes.io/name": "redis"}}
    container = {
        "name": "redis",
        "image": "redis:7-alpine",
        # $(REDIS_PASSWORD) is expanded by Kubernetes from the Secret: clients without it are refused
        "args": [
            "redis-server",
            "--appendonly",
            "yes",
            "--save",
            "60",
            "1000",
            "--dir",
            "/data",
            "--requirepass",
            "$(REDIS_PASSWORD)",
        ],
        "env": [redis_password_env(), {"name": "REDISCLI_AUTH", "value": "$(REDIS_PASSWORD)"}],
        "ports": [{"name": "redis", "containerPort": 6379}],
        "readinessProbe": {"exec": {"command": ["redis-cli", "ping"]}, "periodSeconds": 5},
        "livenessProbe": {"tcpSocket": {"port": "redis"}, "periodSeconds": 10, "failureThreshold": 6},
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {
                "selector": {"app.kubernetes.io/name": "redis"},
                "ports": [{"name": "redis", "port": 6379, "targetPort": "redis"}],
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": meta,
            "spec": {
                "serviceName": "redis",
                "replicas": 1,
                "selector": {"matchLabels": {"app.kubernetes.io/name": "redis"}},
                "template": {
                    "metadata": {"labels": {"app.kubernetes.io/name": "redis"}},
                    "spec": {
                        "automountServiceAccountToken": False,
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": 999,
                            "runAsGroup": 999,
                            "fsGroup": 999,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [container],
                    },
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data"},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}},
                    }
                ],
            },
        },
    ]


REDIS_HEADER = (
    "One Redis for sessions and the job queue, with a password (Secret rollgate-redis). For production\n"
    "a managed Redis is the better choice: drop this file from the kustomization and point the\n"
    "Rollgate containers' ROLLGATE_REDIS_URL at it."
)


def sandbox_docs(provider_policy: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        provider_policy,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "rollgate-sandbox-manager"},
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "rollgate-sandbox-manager"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["pods"],
                    "verbs": ["create", "get", "list", "watch", "patch", "delete"],
                },
                {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
                {
                    "apiGroups": ["networking.k8s.io"],
                    "resources": ["networkpolicies"],
                    "verbs": ["get", "create", "patch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "rollgate-sandbox-manager"},
            "subjects": [{"kind": "ServiceAccount", "name": "rollgate-sandbox-manager"}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rollgate-sandbox-manager"},
        },
    ]


SANDBOX_HEADER = (
    "Sandboxes of the code environment with the kubernetes sandbox provider\n"
    '(rollgate/sandbox/kubernetes.py): one Pod per sandbox, labelled rollgate.io/sandbox "true",\n'
    "driven with kubectl from the resources-code pods, cut off from the network by this policy (the\n"
    "provider applies the same one before its first Pod). Only what managing sandbox Pods needs, in\n"
    "this namespace only."
)
