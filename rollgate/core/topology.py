"""The distributed shape of Rollgate, described once.

compose.yaml, the Kubernetes manifests and the process-level tests all run the same services with
the same `rollgate serve` arguments and the same ROLLGATE_* settings; only the addresses differ
(compose service names on default ports, or 127.0.0.1 with a distinct port per process). Tests in
tests/deploy/ check that compose.yaml and k8s/ agree with what this module produces, so what is
tested on loopback is what the containers run. Pure: no I/O, no environment reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rollgate.core.settings import Settings

Role = Literal["gateway", "agent", "model", "resources"]

# Listening port of each role inside its own container (same as `rollgate serve` defaults).
ROLE_PORTS: dict[str, int] = {"gateway": 8000, "agent": 8100, "model": 8200, "resources": 8300}

HostOf = Callable[[str], str]
PortOf = Callable[[str, int], int]  # (service name, replica index) -> port


class ServiceSpec(BaseModel):
    """One service of the distributed shape: `replicas` processes running the same command."""

    model_config = ConfigDict(frozen=True)

    name: str  # compose service / k8s Deployment name, e.g. "resources-math"
    role: Role
    args: list[str]  # `rollgate` arguments without --port, e.g. ["serve", "--role", "model", ...]
    env: dict[str, str]  # settings as ROLLGATE_* variables
    port: int  # port of replica 0 (in compose and k8s: of every replica)
    replica_ports: list[int]  # listening port of each replica
    urls: list[str]  # base URLs the other services use (one per distinct host:port)
    depends_on: list[str] = Field(default_factory=list)  # services (and "redis") started first

    @property
    def replicas(self) -> int:
        return len(self.replica_ports)

    def command(self, replica: int = 0) -> list[str]:
        """The full `rollgate ...` argument list of one replica."""
        return [*self.args, "--port", str(self.replica_ports[replica])]


def compose_host(service: str) -> str:
    """Compose and Kubernetes: a service is reached by its name (DNS balances its replicas)."""
    return service


def role_port(service: str, replica: int) -> int:
    """Compose and Kubernetes: every container listens on its role's default port."""
    return ROLE_PORTS[_role_of_name(service)]


def _role_of_name(service: str) -> str:
    return "resources" if service.startswith("resources-") else service.split("-")[0]


def _urls(name: str, replicas: int, host_of: HostOf, port_of: PortOf) -> tuple[list[int], list[str]]:
    ports = [port_of(name, i) for i in range(replicas)]
    # dict.fromkeys keeps order and drops duplicates: behind one DNS name, replicas share one URL
    urls = list(dict.fromkeys(f"http://{host_of(name)}:{p}" for p in ports))
    return ports, urls


def distributed_topology(
    envs: Sequence[str],
    *,
    redis_url: str,
    api_key: str,
    host_of: HostOf = compose_host,
    port_of: PortOf = role_port,
    bind_host: str = "0.0.0.0",
    agent_replicas: int = 2,
    env_replicas: int = 1,
    model_backend: str = "local",
    agent_concurrency: int | None = None,
    model_env: Mapping[str, str] | None = None,
) -> list[ServiceSpec]:
    """model, resources-<env> per environment, agent workers and the gateway, in start order.

    Compose/k8s: the defaults (service names, role ports, bind 0.0.0.0). Processes on one machine:
    host_of=lambda s: "127.0.0.1", port_of giving each (service, replica) a free port, bind_host
    "127.0.0.1". `model_env` adds model settings (e.g. ROLLGATE_MODEL__MODEL_PATH).
    """
    if not envs:
        raise ValueError("envs: at least one environment is needed")
    if agent_replicas < 1 or env_replicas < 1:
        raise ValueError("agent_replicas and env_replicas must be >= 1")
    envs = list(dict.fromkeys(envs))
    common = {"ROLLGATE_REDIS_URL": redis_url, "ROLLGATE_API_KEY": api_key}

    def spec(
        name: str, role: Role, replicas: int, extra_args: list[str], env: dict[str, str], depends_on: list[str]
    ) -> ServiceSpec:
        ports, urls = _urls(name, replicas, host_of, port_of)
        return ServiceSpec(
            name=name,
            role=role,
            args=["serve", "--role", role, *extra_args, "--host", bind_host],
            env={**common, **env},
            port=ports[0],
            replica_ports=ports,
            urls=urls,
            depends_on=depends_on,
        )

    model = spec(
        "model", "model", 1, [], {"ROLLGATE_MODEL__BACKEND": model_backend, **dict(model_env or {})}, ["redis"]
    )
    resources = [spec(f"resources-{e}", "resources", env_replicas, ["--env", e], {}, ["redis"]) for e in envs]
    # agents and the gateway know where everything is: the model and each environment's replicas
    wiring = {
        "ROLLGATE_MODEL_URL": model.urls[0],
        "ROLLGATE_ENV_URLS": json.dumps(
            {e: r.urls for e, r in zip(envs, resources, strict=True)}, separators=(",", ":")
        ),
        "ROLLGATE_ENVS": json.dumps(envs, separators=(",", ":")),
    }
    upstream = ["redis", "model", *(r.name for r in resources)]
    agent_env = dict(wiring)
    if agent_concurrency is not None:
        agent_env["ROLLGATE_AGENT__CONCURRENCY"] = str(agent_concurrency)
    agent = spec("agent", "agent", agent_replicas, [], agent_env, upstream)
    gateway = spec("gateway", "gateway", 1, [], dict(wiring), [*upstream, "agent"])
    return [model, *resources, agent, gateway]


def loopback_topology(envs: Sequence[str], *, redis_url: str, api_key: str, port_of: PortOf, **kw) -> list[ServiceSpec]:
    """The same shape as processes on one machine: 127.0.0.1, one port per (service, replica)."""
    return distributed_topology(
        envs,
        redis_url=redis_url,
        api_key=api_key,
        host_of=lambda _service: "127.0.0.1",
        port_of=port_of,
        bind_host="127.0.0.1",
        **kw,
    )


def settings_fields_of(env: Mapping[str, str]) -> set[str]:
    """The Settings paths ("model_url", "model.backend") that ROLLGATE_* variables name."""
    out = set()
    for key in env:
        if key.startswith("ROLLGATE_"):
            out.add(key.removeprefix("ROLLGATE_").lower().replace("__", "."))
    return out


def unknown_settings(env: Mapping[str, str]) -> list[str]:
    """ROLLGATE_* variables that name no Settings field (a typo configures nothing)."""
    bad = []
    for path in sorted(settings_fields_of(env)):
        model: type[BaseModel] = Settings
        for part in path.split("."):
            field = model.model_fields.get(part)
            if field is None:
                bad.append("ROLLGATE_" + path.upper().replace(".", "__"))
                break
            ann = field.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                model = ann
    return bad
