"""compose.yaml runs what the process-level topology describes, and is a valid compose file.

Checked offline here (the docker tier, test_docker_stack.py, runs it): parsed and compared with
rollgate/core/topology.py, validated against the compose-spec schema that check-jsonschema ships,
and rendered by `docker-compose config` (Debian's docker-compose package) where it is installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rollgate.core.topology import unknown_settings
from tests.deploy.manifests import (
    COMPOSE,
    COMPOSE_SECRETS,
    ROOT,
    SHIPPED_ENVS,
    compose_services,
    gen_deploy,
    interpolate,
    rollgate_services,
)


def _topology():
    """The generator's topology, with .env's secrets filled in as compose would."""
    specs = gen_deploy().topology("compose")
    return {s.name: s.model_copy(update={"env": interpolate(s.env, COMPOSE_SECRETS)}) for s in specs}


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
    _assert_matches_topology(compose_services(COMPOSE_SECRETS))


def test_compose_covers_every_registered_environment_and_one_service_per_family():
    from rollgate.resources_servers.registry import default_registry

    services = compose_services(COMPOSE_SECRETS)
    assert {f"resources-{e}" for e in SHIPPED_ENVS} <= set(services)
    served = json.loads(services["gateway"]["environment"]["ROLLGATE_ENVS"])
    left_out = gen_deploy().NOT_DEPLOYED  # families without a container shape yet, each with its reason
    assert set(served) == {e for e in default_registry().specs() if e.split("/")[0] not in left_out}
    families = {n.split("/")[0] for n in served if "/" in n}
    for family in families:  # every member inside one service, under /envs/<member>
        name = "resources-" + family.replace("_", "-")
        assert services[name]["command"][4] == f"{family}/*"
    urls = json.loads(services["gateway"]["environment"]["ROLLGATE_ENV_URLS"])
    for env, (url,) in urls.items():
        assert url.endswith(f"/envs/{env}") == ("/" in env), env


def test_model_code_runs_only_in_the_sandbox_service_which_holds_no_other_secret():
    services = compose_services(COMPOSE_SECRETS)
    code = services["resources-code"]
    assert code["environment"]["ROLLGATE_SANDBOX__PROVIDER"] == "remote"
    assert code["environment"]["ROLLGATE_SANDBOX__URL"] == "http://sandbox:8400"
    assert code["depends_on"]["sandbox"]["condition"] == "service_healthy"
    sandbox = services["sandbox"]
    assert set(sandbox["environment"]) == {"ROLLGATE_SANDBOX__TOKEN"}  # no API key, no Redis
    assert sandbox["cap_drop"] == ["ALL"] and "SYS_ADMIN" in sandbox["cap_add"] and "privileged" not in sandbox
    for name, svc in services.items():  # nobody gets the Docker socket
        assert not any("docker.sock" in str(v) for v in svc.get("volumes", [])), name


def test_redis_requires_the_password_every_service_uses():
    services = compose_services(COMPOSE_SECRETS)
    cmd = services["redis"]["command"]
    assert cmd[cmd.index("--requirepass") + 1] == "p"
    assert services["redis"]["environment"]["REDISCLI_AUTH"] == "p"  # the health check authenticates
    for name, svc in rollgate_services(services).items():
        if "ROLLGATE_REDIS_URL" in svc["environment"]:
            assert svc["environment"]["ROLLGATE_REDIS_URL"] == "redis://:p@redis:6379/0", name


def test_every_service_has_a_healthcheck_and_the_gateway_is_published():
    services = compose_services(COMPOSE_SECRETS)
    for name, svc in services.items():
        if name != "prometheus":
            assert svc.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert services["gateway"]["ports"] == ["8000:8000"]
    assert "results:/var/lib/rollgate" in services["gateway"]["volumes"]


def test_gpu_profile_puts_our_model_server_in_front_of_vllm():
    services = compose_services(COMPOSE_SECRETS)
    vllm, front = services["vllm"], services["model-vllm"]
    assert vllm["profiles"] == ["gpu"] and front["profiles"] == ["gpu"]
    assert vllm["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    # vLLM enforces schemas with llguidance, as the local backend's guide_backend llguidance does
    flag = vllm["command"].index("--structured-outputs-config.backend")
    assert vllm["command"][flag + 1] == "guidance"
    assert front["command"] == _topology()["model"].command()
    assert front["environment"]["ROLLGATE_MODEL__BACKEND"] == "vllm"
    assert front["depends_on"]["vllm"]["condition"] == "service_healthy"
    assert unknown_settings(front["environment"]) == []
    # the agents switch to it through one documented variable
    switched = compose_services({**COMPOSE_SECRETS, "ROLLGATE_MODEL_URL": "http://model-vllm:8200"})
    assert switched["agent"]["environment"]["ROLLGATE_MODEL_URL"] == "http://model-vllm:8200"


@pytest.mark.parametrize("secret", sorted(COMPOSE_SECRETS))
def test_a_missing_secret_is_refused_with_the_variable_named(secret):
    with pytest.raises(KeyError, match=secret):
        compose_services({k: v for k, v in COMPOSE_SECRETS.items() if k != secret})


def test_env_example_sets_every_variable_compose_requires():
    required = set(re.findall(r"\$\{(\w+):\?", COMPOSE.read_text()))
    assert required == set(COMPOSE_SECRETS)
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
    out = _compose_config(tmp_path, COMPOSE_SECRETS)
    assert out.returncode == 0, out.stderr
    rendered = yaml.safe_load(out.stdout)
    _assert_matches_topology(rendered["services"])
    assert {"redis-data", "results"} <= set(rendered["volumes"])


def test_docker_compose_refuses_to_start_without_an_api_key(tmp_path):
    out = _compose_config(tmp_path, {k: v for k, v in COMPOSE_SECRETS.items() if k != "ROLLGATE_API_KEY"})
    assert out.returncode != 0
    assert "ROLLGATE_API_KEY" in out.stderr
