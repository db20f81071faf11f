"""k8s/: valid manifests (kubernetes-validate --strict, offline schemas) that run what the topology
describes, with probes, limits, non-root pods, autoscalers and the sandbox network policy.

No cluster runs here. Overlays are rendered with kustomize (`kubectl kustomize` or `kustomize`)
where one is installed; without one, the base files and each overlay's patch files are validated
on their own and the rendering tests skip.
"""

from __future__ import annotations

import functools

import pytest
import yaml

from tests.deploy.manifests import (
    K8S,
    SHIPPED_ENVS,
    base_docs,
    by_kind,
    gen_deploy,
    kustomize_build,
    kustomize_cmd,
)

OVERLAYS = sorted(p.name for p in (K8S / "overlays").iterdir() if p.is_dir())
# kinds kubernetes-validate has no schema for (KEDA's CRD); checked by test_keda_* instead
CRD_KINDS = {"ScaledObject"}


def _validate(docs: list[dict]) -> None:
    """kubernetes-validate --strict, in-process: its schemas ship with the package (offline)."""
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (the dev extra)")
    import kubernetes_validate.utils as kv_utils

    # it re-reads a multi-MB schema file for every object; reading each once makes this tier 3x faster
    if not hasattr(kv_utils.schema_contents, "cache_info"):
        kv_utils.schema_contents = functools.cache(kv_utils.schema_contents)
    version = kv.latest_version()
    errors = []
    for d in docs:
        if d["kind"] in CRD_KINDS:
            continue
        try:
            kv.validate(d, version, strict=True)
        except kv.ValidationError as exc:
            errors.append(f"{d['kind']}/{d['metadata'].get('name')}: {exc.message} at {list(exc.path)}")
    assert not errors, "\n".join(errors)


def _rollgate_deployments(docs: list[dict]) -> dict[str, dict]:
    return {
        n: d
        for n, d in by_kind(docs, "Deployment").items()
        if d["spec"]["template"]["spec"]["containers"][0]["image"].startswith("rollgate")
    }


def _effective_env(docs: list[dict], container: dict) -> dict[str, str | None]:
    """What the container's process sees: envFrom ConfigMaps/Secrets, then env (secret values: None)."""
    maps, secrets = by_kind(docs, "ConfigMap"), by_kind(docs, "Secret")
    env: dict[str, str | None] = {}
    for src in container.get("envFrom", []):
        if "configMapRef" in src:
            env.update(maps[src["configMapRef"]["name"]]["data"])
        else:
            env.update({k: None for k in secrets[src["secretRef"]["name"]]["stringData"]})
    env.update({e["name"]: e.get("value") for e in container.get("env", [])})
    return env


# Kubernetes only: the code environment's sandbox Pods live in the pod's namespace, and the Redis
# password comes from a Secret (expanded into ROLLGATE_REDIS_URL by Kubernetes).
PLATFORM_ONLY = {"POD_NAMESPACE", "ROLLGATE_SANDBOX__OPTIONS", "REDIS_PASSWORD"}


def _topology():
    return gen_deploy().topology("k8s")


def test_base_manifests_validate_strictly():
    _validate(base_docs())


def test_strict_validation_catches_a_misspelled_field():
    dep = dict(by_kind(base_docs(), "Deployment")["agent"])
    dep["spec"] = {**dep["spec"], "replica": 2}
    with pytest.raises(AssertionError, match="replica"):
        _validate([dep])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_resource_files_validate_on_their_own(overlay):
    """The whole objects an overlay adds; its patches are checked once rendered (below)."""
    kust = yaml.safe_load((K8S / "overlays" / overlay / "kustomization.yaml").read_text())
    files = [K8S / "overlays" / overlay / r for r in kust.get("resources", []) if r.endswith(".yaml")]
    for f in files:
        _validate([d for d in yaml.safe_load_all(f.read_text()) if d])
    patch_files = [K8S / "overlays" / overlay / p["path"] for p in kust.get("patches", []) if "path" in p]
    for f in patch_files:  # a patch names an object of the base it changes
        base = {(d["kind"], d["metadata"]["name"]) for d in base_docs()}
        for d in yaml.safe_load_all(f.read_text()):
            assert (d["kind"], d["metadata"]["name"]) in base, f"{f.name} patches a missing object"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_and_validates_strictly(overlay):
    cmd = kustomize_cmd()
    if cmd is None:
        pytest.skip("no kustomize here (install kubectl or kustomize); patch files validated alone")
    docs = kustomize_build(cmd, K8S / "overlays" / overlay)
    _validate(docs)
    namespaces = {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"}
    assert len(namespaces) == 1 and None not in namespaces
    # every overlay still runs the topology's commands
    assert {
        n: d["spec"]["template"]["spec"]["containers"][0]["args"] for n, d in _rollgate_deployments(docs).items()
    } == _topology_commands()


def _topology_commands() -> dict[str, list[str]]:
    return {s.name: s.command() for s in _topology()}


def test_deployments_run_the_topology_commands_with_its_settings():
    docs = base_docs()
    deps = _rollgate_deployments(docs)
    topo = {s.name: s for s in _topology()}
    assert set(deps) == set(topo)
    for name, spec in topo.items():
        dep = deps[name]
        container = dep["spec"]["template"]["spec"]["containers"][0]
        assert container["args"] == spec.command(), name
        env = _effective_env(docs, container)
        if name == "resources-code":
            assert env["ROLLGATE_SANDBOX__PROVIDER"] == "kubernetes"
        env = {k: v for k, v in env.items() if k not in PLATFORM_ONLY}
        assert env.keys() == spec.env.keys(), name
        assert {k: v for k, v in env.items() if v is not None} == {
            k: v for k, v in spec.env.items() if k != "ROLLGATE_API_KEY"
        }, name
        assert dep["spec"]["replicas"] == (spec.replicas if name != "gateway" else 2)
        assert container["ports"][0]["containerPort"] == spec.port
    services = by_kind(docs, "Service")
    for spec in topo.values():  # the topology's URLs resolve to a Service on the right port
        assert services[spec.name]["spec"]["ports"][0]["port"] == spec.port


def test_every_rollgate_pod_is_probed_limited_and_non_root():
    for name, dep in _rollgate_deployments(base_docs()).items():
        pod = dep["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] != 0, name
        c = pod["containers"][0]
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            assert c[probe]["httpGet"]["path"] == "/healthz", (name, probe)
        assert c["securityContext"]["allowPrivilegeEscalation"] is False, name
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"], name
        assert {"cpu", "memory"} <= set(c["resources"]["requests"]), name
        assert {"cpu", "memory"} <= set(c["resources"]["limits"]), name
        labels = dep["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/component"] != "sandbox", name  # never caught by the policy


def test_autoscalers_and_disruption_budgets_target_real_deployments():
    docs = base_docs()
    deps = by_kind(docs, "Deployment")
    hpas = by_kind(docs, "HorizontalPodAutoscaler")
    assert set(hpas) == {"agent", *(s.name for s in _topology() if s.role == "resources")}
    assert {f"resources-{e}" for e in SHIPPED_ENVS} <= set(hpas)
    for hpa in hpas.values():
        assert hpa["spec"]["scaleTargetRef"]["name"] in deps
        assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
        assert hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    for name, pdb in by_kind(docs, "PodDisruptionBudget").items():
        selector = pdb["spec"]["selector"]["matchLabels"]
        labels = deps[name]["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), name


def test_sandbox_policy_is_the_one_the_kubernetes_provider_applies():
    from rollgate.sandbox.kubernetes import KubernetesProvider

    docs = base_docs()
    provider_policy = KubernetesProvider().network_policy()
    ours = by_kind(docs, "NetworkPolicy")[provider_policy["metadata"]["name"]]
    assert ours["spec"] == provider_policy["spec"]  # same selector, no ingress, no egress
    assert ours["spec"]["egress"] == [] and "Egress" in ours["spec"]["policyTypes"]
    pod_labels = KubernetesProvider().pod_spec("x")["metadata"]["labels"]
    assert ours["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()


def test_the_code_environment_may_manage_sandbox_pods_and_nothing_more():
    docs = base_docs()
    code = by_kind(docs, "Deployment")["resources-code"]["spec"]["template"]["spec"]
    role = by_kind(docs, "Role")[code["serviceAccountName"]]
    granted = {r: set(rule["verbs"]) for rule in role["rules"] for r in rule["resources"]}
    assert {"create", "delete", "watch"} <= granted["pods"]
    assert "create" in granted["pods/exec"]
    assert set(granted) == {"pods", "pods/exec", "networkpolicies"}
    assert not by_kind(docs, "ClusterRole")  # never cluster-wide
    for name, dep in by_kind(docs, "Deployment").items():  # no other pod gets an API token
        if name != "resources-code":
            assert dep["spec"]["template"]["spec"]["automountServiceAccountToken"] is False, name


def test_redis_requires_the_password_from_a_secret():
    docs = base_docs()
    redis = by_kind(docs, "StatefulSet")["redis"]["spec"]["template"]["spec"]["containers"][0]
    assert redis["args"][redis["args"].index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    secret_ref = {"name": "rollgate-redis", "key": "password"}
    assert {"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": secret_ref}} in redis["env"]
    assert "password" in by_kind(docs, "Secret")["rollgate-redis"]["stringData"]
    for name, dep in _rollgate_deployments(docs).items():
        env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
        names = [e["name"] for e in env]
        # Kubernetes expands $(REDIS_PASSWORD) only from variables defined before it
        assert names.index("REDIS_PASSWORD") < names.index("ROLLGATE_REDIS_URL"), name
        url = next(e["value"] for e in env if e["name"] == "ROLLGATE_REDIS_URL")
        assert url == "redis://:$(REDIS_PASSWORD)@redis:6379/0", name


def test_keda_scaler_follows_the_gateways_queue_depth_and_replaces_the_agent_hpa():
    """KEDA reads the queue depth the gateway exports (each job has a Redis stream of its own, so no
    single stream could be followed): the URL is the gateway Service's /metrics, which needs no key,
    and the value is a label-free gauge that a real gateway's registry exposes."""
    from urllib.parse import urlsplit

    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from rollgate.core.auth import OPEN_PATHS
    from rollgate.core.metrics import Metrics

    scaled = yaml.safe_load((K8S / "components" / "keda" / "scaledobject.yaml").read_text())
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"]["scaleTargetRef"]["name"] in _rollgate_deployments(base_docs())
    trigger = scaled["spec"]["triggers"][0]
    assert trigger["type"] == "metrics-api" and trigger["metadata"]["format"] == "prometheus"
    url = urlsplit(trigger["metadata"]["url"])
    service = by_kind(base_docs(), "Service")["gateway"]
    assert url.hostname.split(".")[0] == "gateway" and url.path == "/metrics" and url.path in OPEN_PATHS
    assert url.port in {p["port"] for p in service["spec"]["ports"]}
    exported = {fam.name: fam for fam in text_string_to_metric_families(generate_latest(Metrics().registry).decode())}
    fam = exported[trigger["metadata"]["valueLocation"]]
    assert fam.type == "gauge" and all(not s.labels for s in fam.samples)
    assert float(trigger["metadata"]["targetValue"]) > 0
    cmd = kustomize_cmd()
    if cmd is not None:
        docs = kustomize_build(cmd, K8S / "overlays" / "keda")
        assert "agent" not in by_kind(docs, "HorizontalPodAutoscaler")
        assert "agent" in by_kind(docs, "ScaledObject")


def test_gpu_overlay_requests_a_gpu_for_vllm_and_points_the_model_server_at_it():
    cmd = kustomize_cmd()
    if cmd is None:
        pytest.skip("no kustomize here (install kubectl or kustomize)")
    docs = kustomize_build(cmd, K8S / "overlays" / "gpu")
    deps = by_kind(docs, "Deployment")
    vllm = deps["vllm"]["spec"]["template"]["spec"]["containers"][0]
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert vllm["args"][vllm["args"].index("--structured-outputs-config.backend") + 1] == "guidance"
    model = deps["model"]["spec"]["template"]["spec"]["containers"][0]
    env = _effective_env(docs, model)
    assert env["ROLLGATE_MODEL__BACKEND"] == "vllm"
    assert env["ROLLGATE_MODEL__UPSTREAM_URLS"] == '["http://vllm:8000"]'
    assert "nvidia.com/gpu" not in model["resources"].get("limits", {})
