"""rollgate/core/topology.py: one description of the distributed shape, whatever the addresses."""

from __future__ import annotations

import itertools
import json

import httpx
import pytest

from rollgate.core.settings import Settings
from rollgate.core.topology import (
    ROLE_PORTS,
    distributed_topology,
    loopback_topology,
    unknown_settings,
)
from tests.conftest import free_port
from tests.procs import ServerProcess, rollgate_cmd

ENVS = ["math", "wordle"]


def _loopback(envs=ENVS, **kw):
    counter = itertools.count(20000)
    ports: dict[tuple[str, int], int] = {}
    return loopback_topology(
        envs,
        redis_url="redis://127.0.0.1:6379/0",
        api_key="k",
        port_of=lambda s, i: ports.setdefault((s, i), next(counter)),
        **kw,
    )


def _strip_addresses(args: list[str]) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("--host", "--port"):
            skip = True
            continue
        out.append(a)
    return out


def test_services_come_in_start_order_model_envs_agent_gateway():
    names = [s.name for s in distributed_topology(ENVS, redis_url="redis://redis:6379/0", api_key="k")]
    assert names == ["model", "resources-math", "resources-wordle", "agent", "gateway"]


def test_loopback_and_compose_shapes_run_the_same_commands_and_settings():
    compose = distributed_topology(
        ENVS, redis_url="redis://redis:6379/0", api_key="k", agent_replicas=3, env_replicas=2
    )
    local = _loopback(agent_replicas=3, env_replicas=2)
    assert [s.name for s in compose] == [s.name for s in local]
    for c, lo in zip(compose, local, strict=True):
        assert c.role == lo.role
        assert _strip_addresses(c.command()) == _strip_addresses(lo.command())
        assert c.env.keys() == lo.env.keys()
        assert c.replicas == lo.replicas
        assert c.depends_on == lo.depends_on


def test_compose_shape_binds_all_interfaces_on_role_ports():
    for s in distributed_topology(ENVS, redis_url="redis://redis:6379/0", api_key="k"):
        assert s.command()[-4:] == ["--host", "0.0.0.0", "--port", str(ROLE_PORTS[s.role])]
        assert s.urls == [f"http://{s.name}:{ROLE_PORTS[s.role]}"]


def test_loopback_replicas_get_distinct_ports_and_each_is_listed_for_the_agents():
    topo = {s.name: s for s in _loopback(env_replicas=2, agent_replicas=2)}
    math = topo["resources-math"]
    assert len(set(math.replica_ports)) == 2
    assert math.urls == [f"http://127.0.0.1:{p}" for p in math.replica_ports]
    assert math.command(1)[-4:] == ["--host", "127.0.0.1", "--port", str(math.replica_ports[1])]
    env_urls = json.loads(topo["agent"].env["ROLLGATE_ENV_URLS"])
    assert env_urls == {"math": math.urls, "wordle": topo["resources-wordle"].urls}
    all_ports = [p for s in topo.values() for p in s.replica_ports]
    assert len(all_ports) == len(set(all_ports))


def test_compose_replicas_share_one_balanced_url():
    topo = {
        s.name: s for s in distributed_topology(["math"], redis_url="redis://redis:6379/0", api_key="k", env_replicas=3)
    }
    assert topo["resources-math"].replicas == 3
    assert json.loads(topo["gateway"].env["ROLLGATE_ENV_URLS"]) == {"math": ["http://resources-math:8300"]}


def test_every_setting_the_topology_sets_is_a_real_settings_field():
    for s in _loopback(agent_concurrency=8, model_env={"ROLLGATE_MODEL__MODEL_PATH": "/m"}):
        assert unknown_settings(s.env) == [], s.name
    assert unknown_settings({"ROLLGATE_MODEL__BAKEND": "x", "ROLLGATE_REDIS": "y"}) == [
        "ROLLGATE_MODEL__BAKEND",
        "ROLLGATE_REDIS",
    ]


def test_agent_settings_parse_into_the_wiring_they_describe(monkeypatch):
    topo = {s.name: s for s in _loopback(agent_concurrency=8)}
    for key, value in topo["agent"].env.items():
        monkeypatch.setenv(key, value)
    settings = Settings.load()
    assert settings.model_url == topo["model"].urls[0]
    assert settings.env_urls == {"math": topo["resources-math"].urls, "wordle": topo["resources-wordle"].urls}
    assert settings.envs == ENVS
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.api_key == "k"
    assert settings.agent.concurrency == 8


def test_model_backend_and_extra_model_settings_reach_only_the_model(monkeypatch):
    topo = {
        s.name: s
        for s in _loopback(model_backend="vllm", model_env={"ROLLGATE_MODEL__UPSTREAM_URLS": '["http://v:1"]'})
    }
    for key, value in topo["model"].env.items():
        monkeypatch.setenv(key, value)
    settings = Settings.load()
    assert settings.model.backend == "vllm"
    assert settings.model.upstream_urls == ["http://v:1"]
    assert "ROLLGATE_MODEL__BACKEND" not in topo["agent"].env


@pytest.mark.parametrize(
    "kw, field",
    [({"envs": []}, "envs"), ({"agent_replicas": 0}, "agent_replicas"), ({"env_replicas": 0}, "env_replicas")],
)
def test_bad_shapes_are_refused_naming_the_argument(kw, field):
    args = {"envs": ["math"], **kw}
    with pytest.raises(ValueError, match=field):
        distributed_topology(args.pop("envs"), redis_url="r", api_key="k", **args)


def test_a_resources_service_started_from_the_topology_serves(tmp_path, redis_url):
    """The real `rollgate serve` process, with exactly the topology's command and settings."""
    port = free_port()
    spec = next(
        s
        for s in loopback_topology(["wordle"], redis_url=redis_url, api_key="deploy-test", port_of=lambda s, i: port)
        if s.name == "resources-wordle"
    )
    with ServerProcess(rollgate_cmd(*spec.command()), port, env=spec.env, log_path=tmp_path / "resources.log") as proc:
        headers = {"Authorization": "Bearer deploy-test"}
        assert httpx.get(proc.url + "/healthz", timeout=5).status_code == 200
        tools = httpx.get(proc.url + "/tools", headers=headers, timeout=5)
        assert tools.status_code == 200, tools.text
        assert tools.json() and all(t.get("name") or t.get("function") for t in tools.json())
        # the topology's key is enforced: the service is not open to whoever reaches it
        assert httpx.get(proc.url + "/tools", timeout=5).status_code == 401


def test_a_family_is_one_service_and_each_member_a_url_under_it():
    members = ["reasoning_gym/chain_sum", "reasoning_gym/gcd"]
    topo = {
        s.name: s
        for s in distributed_topology(
            ["math", "reasoning_gym/*"],
            redis_url="r",
            api_key="k",
            families={"reasoning_gym/*": members},
        )
    }
    fam = topo["resources-reasoning-gym"]
    assert fam.command()[3:5] == ["--env", "reasoning_gym/*"] and fam.serves == members
    urls = json.loads(topo["gateway"].env["ROLLGATE_ENV_URLS"])
    assert urls["reasoning_gym/gcd"] == ["http://resources-reasoning-gym:8300/envs/reasoning_gym/gcd"]
    assert urls["math"] == ["http://resources-math:8300"]
    assert json.loads(topo["agent"].env["ROLLGATE_ENVS"]) == ["math", *members]
    with pytest.raises(ValueError, match="families"):
        distributed_topology(["reasoning_gym/*"], redis_url="r", api_key="k")


def test_code_runs_its_sandboxes_in_a_sandbox_service_that_holds_no_other_secret():
    topo = {s.name: s for s in distributed_topology(["code"], redis_url="r", api_key="k", sandbox_token="t")}
    assert list(topo) == ["model", "sandbox", "resources-code", "agent", "gateway"]
    assert topo["sandbox"].env == {"ROLLGATE_SANDBOX__TOKEN": "t"}
    code = topo["resources-code"]
    assert code.env["ROLLGATE_SANDBOX__PROVIDER"] == "remote"
    assert code.env["ROLLGATE_SANDBOX__URL"] == "http://sandbox:8400"
    assert "sandbox" in code.depends_on
    assert unknown_settings(code.env) == [] and unknown_settings(topo["sandbox"].env) == []
    with pytest.raises(ValueError, match="sandbox_token"):
        distributed_topology(["code"], redis_url="r", api_key="k")
    k8s = {s.name: s for s in distributed_topology(["code"], redis_url="r", api_key="k", code_sandbox="kubernetes")}
    assert "sandbox" not in k8s and k8s["resources-code"].env["ROLLGATE_SANDBOX__PROVIDER"] == "kubernetes"


def test_one_resources_process_serves_several_environments_by_pattern(tmp_path, redis_url):
    port = free_port()
    argv = rollgate_cmd("serve", "--role", "resources", "--env", "w*", "--host", "127.0.0.1", "--port", str(port))
    with ServerProcess(argv, port, env={"ROLLGATE_REDIS_URL": redis_url}, log_path=tmp_path / "multi.log") as proc:
        assert httpx.get(proc.url + "/envs", timeout=5).json() == ["wordle", "workplace"]
        for env in ("wordle", "workplace"):
            tools = httpx.get(f"{proc.url}/envs/{env}/tools", timeout=5)
            assert tools.status_code == 200 and tools.json(), env
        seeded = httpx.post(
            f"{proc.url}/envs/wordle/sessions", json={"responses_create_params": {"input": []}}, timeout=5
        )
        assert seeded.status_code in (200, 400), seeded.text  # the route is the environment's own
