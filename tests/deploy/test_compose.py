"""compose.yaml runs what the process-level topology describes, and is a valid compose file.

No Docker engine runs here, so the file is checked offline: parsed and compared with
rollgate/core/topology.py, validated against the compose-spec schema that check-jsonschema ships,
and rendered by `docker-compose config` (Debian's docker-compose package) where it is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rollgate.core.topology import distributed_topology, unknown_settings
from tests.deploy.manifests import COMPOSE, ROOT, SHIPPED_ENVS, compose_services, rollgate_services

API_KEY = "compose-test-key"


def _topology():
    return {s.name: s for s in distributed_topology(SHIPPED_ENVS, redis_url="redis://redis:6379/0", api_key=API_KEY)}


def _assert_matches_topology(services: dict) -> None:
    ours = rollgate_services(services)
    topo = _topology()
    # model-vllm (profile gpu) is the model role again, with backend vllm: checked separately
    assert set(ours) - {"model-vllm"} == set(topo)
    for name, spec in topo.items():
        svc = ours[name]
        assert [str(a) for a in svc["command"]] == spec.command(), name
        assert {k: str(v) for k, v in svc["environment"].items()} == spec.env, name
        deps = svc.get("depends_on", {})
        assert set(deps) == set(spec.depends_on), name
        assert all(d["condition"] == "service_healthy" for d in deps.values()), name
        assert svc.get("deploy", {}).get("replicas", 1) == spec.replicas, name


def test_compose_services_match_the_topology():
    _assert_matches_topology(compose_services({"ROLLGATE_API_KEY": API_KEY}))


def test_compose_covers_every_shipped_environment():
    from rollgate.resources_servers.registry import env_names

    services = compose_services({"ROLLGATE_API_KEY": API_KEY})
    assert {f"resources-{e}" for e in env_names()} <= set(services)


def test_every_service_has_a_healthcheck_and_the_gateway_is_published():
    services = compose_services({"ROLLGATE_API_KEY": API_KEY})
    for name, svc in services.items():
        if name != "prometheus":
            assert svc.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert services["gateway"]["ports"] == ["8000:8000"]
    assert "results:/var/lib/rollgate" in services["gateway"]["volumes"]


def test_gpu_profile_puts_our_model_server_in_front_of_vllm():
    services = compose_services({"ROLLGATE_API_KEY": API_KEY})
    vllm, front = services["vllm"], services["model-vllm"]
    assert vllm["profiles"] == ["gpu"] and front["profiles"] == ["gpu"]
    assert vllm["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert front["command"] == _topology()["model"].command()
    assert front["environment"]["ROLLGATE_MODEL__BACKEND"] == "vllm"
    assert front["depends_on"]["vllm"]["condition"] == "service_healthy"
    assert unknown_settings(front["environment"]) == []
    # the agents switch to it through one documented variable
    switched = compose_services({"ROLLGATE_API_KEY": API_KEY, "ROLLGATE_MODEL_URL": "http://model-vllm:8200"})
    assert switched["agent"]["environment"]["ROLLGATE_MODEL_URL"] == "http://model-vllm:8200"


def test_a_missing_api_key_is_refused_with_the_variable_named():
    with pytest.raises(KeyError, match="ROLLGATE_API_KEY"):
        compose_services({})


def test_env_example_sets_every_variable_compose_requires():
    required = set(re.findall(r"\$\{(\w+):\?", COMPOSE.read_text()))
    assert required == {"ROLLGATE_API_KEY"}
    example = (ROOT / ".env.example").read_text().splitlines()
    for var in required:
        assert any(line.startswith(f"{var}=") and line.split("=", 1)[1] for line in example), var


def test_compose_file_is_valid_against_the_compose_spec_schema():
    beside_python = Path(sys.executable).parent / "check-jsonschema"
    exe = str(beside_python) if beside_python.exists() else shutil.which("check-jsonschema")
    if exe is None:
        pytest.skip("check-jsonschema is not installed (pip install -e '.[dev]')")
    out = subprocess.run(
        [exe, "--builtin-schema", "vendor.compose-spec", str(COMPOSE)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr


def _docker_compose() -> str:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose is not installed (Debian: apt-get install -y docker-compose)")
    return exe


def _compose_config(tmp_path, env: dict[str, str]) -> subprocess.CompletedProcess:
    env_file = tmp_path / "empty.env"
    env_file.write_text("")  # a developer's own .env must not change what is checked
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ROLLGATE_", "VLLM_", "COMPOSE_", "PROMETHEUS_"))}
    return subprocess.run(
        [
            _docker_compose(),
            "-f",
            str(COMPOSE),
            "--env-file",
            str(env_file),
            "--profile",
            "gpu",
            "--profile",
            "monitoring",
            "config",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **env},
    )


def test_docker_compose_renders_the_file_offline_as_the_topology(tmp_path):
    out = _compose_config(tmp_path, {"ROLLGATE_API_KEY": API_KEY})
    assert out.returncode == 0, out.stderr
    rendered = yaml.safe_load(out.stdout)
    _assert_matches_topology(rendered["services"])
    assert {"redis-data", "results"} <= set(rendered["volumes"])


def test_docker_compose_refuses_to_start_without_an_api_key(tmp_path):
    out = _compose_config(tmp_path, {})
    assert out.returncode != 0
    assert "ROLLGATE_API_KEY" in out.stderr
