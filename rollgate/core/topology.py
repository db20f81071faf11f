"""The distributed shape of Rollgate, described once.

compose.yaml, the Kubernetes manifests and the process-level tests all run the same services with
the same `rollgate serve` arguments and the same ROLLGATE_* settings; only the addresses differ
(compose service names on default ports, or 127.0.0.1 with a distinct port per process).
scripts/gen_deploy.py renders compose.yaml and k8s/base from this module, and tests/deploy/ fail when
the files differ from a fresh rendering, so what is tested on loopback is what the containers run.
Pure: no I/O, no environment reads.

Environments: a plain name ("math") gets its own resources service serving it at its root. A
family pattern ("reasoning_gym/*", with its members given in `families`) gets ONE resources service
serving every member under /envs/<member>; the agents and the gateway learn one URL per member.
The `code` environment runs model-written code in a separate `sandbox` service (role sandbox, the
only service with the privileges namespaces need and no secret but its own token), or with the
kubernetes provider (sandbox Pods) where `code_sandbox="kubernetes"`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rollgate.core.settings import Settings

Role = Literal["gateway", "agent", "model", "resources", "sandbox"]
CodeSandbox = Literal["service", "kubernetes", "local"]

# Listening port of each role inside its own container (same as `rollgate serve` defaults).
ROLE_PORTS: dict[str, int] = {"gateway": 8000, "agent": 8100, "model": 8200, "resources": 8300, "sandbox": 8400}

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
    serves: list[str] = Field(default_factory=list)  # role resources: the environments it serves

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


def is_pattern(env: str) -> bool:
    return any(c in env for c in "*?[")


def resources_service_name(env: str) -> str:
    """ "math" -> "resources-math"; "reasoning_gym/*" -> "resources-reasoning-gym" (a DNS label)."""
    base = env.split("/")[0] if is_pattern(env) else env
    label = "".join(c if c.isalnum() else "-" for c in base.lower()).strip("-")
    if not label:
        raise ValueError(f"envs: {env!r} gives no service name")
    return f"resources-{label}"


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
    families: Mapping[str, Sequence[str]] | None = None,
    code_sandbox: CodeSandbox = "service",
    sandbox_token: str | None = None,
) -> list[ServiceSpec]:
    """model, [sandbox], one resources service per environment or family, agents, the gateway, in
    start order.

    Compose/k8s: the defaults (service names, role ports, bind 0.0.0.0). Processes on one machine:
    host_of=lambda s: "127.0.0.1", port_of giving each (service, replica) a free port, bind_host
    "127.0.0.1". `model_env` adds model settings (e.g. ROLLGATE_MODEL__MODEL_PATH). `families` maps
    each pattern in `envs` to its member environments. `sandbox_token` is the sandbox service's
    token (needed when `code` runs with code_sandbox="service").
    """
    if not envs:
        raise ValueError("envs: at least one environment is needed")
    if agent_replicas < 1 or env_replicas < 1:
        raise ValueError("agent_replicas and env_replicas must be >= 1")
    envs = list(dict.fromkeys(envs))
    families = dict(families or {})
    for env in envs:
        if is_pattern(env) and not families.get(env):
            raise ValueError(f"families: the members of {env!r} are needed (a pattern serves a known family)")
    needs_sandbox = "code" in envs and code_sandbox == "service"
    if needs_sandbox and not sandbox_token:
        raise ValueError("sandbox_token: the code environment's sandbox service needs its own token")
    common = {"ROLLGATE_REDIS_URL": redis_url, "ROLLGATE_API_KEY": api_key}

    def spec(
        name: str,
        role: Role,
        replicas: int,
        extra_args: list[str],
        env: dict[str, str],
        depends_on: list[str],
        *,
        base_env: Mapping[str, str] = common,
        serves: Sequence[str] = (),
    ) -> ServiceSpec:
        ports, urls = _urls(name, replicas, host_of, port_of)
        return ServiceSpec(
            name=name,
            role=role,
            args=["serve", "--role", role, *extra_args, "--host", bind_host],
            env={**base_env, **env},
            port=ports[0],
            replica_ports=ports,
            urls=urls,
            depends_on=depends_on,
            serves=list(serves),
        )

    model = spec(
        "model", "model", 1, [], {"ROLLGATE_MODEL__BACKEND": model_backend, **dict(model_env or {})}, ["redis"]
    )
    services = [model]
    sandbox = None
    if needs_sandbox:
        # No Redis, no API key: the one service that runs model code holds nothing else worth taking.
        sandbox = spec("sandbox", "sandbox", 1, [], {"ROLLGATE_SANDBOX__TOKEN": str(sandbox_token)}, [], base_env={})
        services.append(sandbox)
    resources = []
    env_urls: dict[str, list[str]] = {}
    for env in envs:
        members = list(families[env]) if is_pattern(env) else [env]
        extra: dict[str, str] = {}
        deps = ["redis"]
        if env == "code":
            extra = code_sandbox_env(code_sandbox, sandbox.urls[0] if sandbox else None, sandbox_token)
            deps += [sandbox.name] if sandbox else []
        r = spec(resources_service_name(env), "resources", env_replicas, ["--env", env], extra, deps, serves=members)
        resources.append(r)
        for m in members:
            # a family's members live under /envs/<member> of their one service
            env_urls[m] = [f"{u}/envs/{m}" for u in r.urls] if is_pattern(env) else list(r.urls)
    services += resources
    # agents and the gateway know where everything is: the model and each environment's replicas
    wiring = {
        "ROLLGATE_MODEL_URL": model.urls[0],
        "ROLLGATE_ENV_URLS": json.dumps(env_urls, separators=(",", ":")),
        "ROLLGATE_ENVS": json.dumps(list(env_urls), separators=(",", ":")),
    }
    upstream = ["redis", "model", *(r.name for r in resources)]
    agent_env = dict(wiring)
    if agent_concurrency is not None:
        agent_env["ROLLGATE_AGENT__CONCURRENCY"] = str(agent_concurrency)
    agent = spec("agent", "agent", agent_replicas, [], agent_env, upstream)
    gateway = spec("gateway", "gateway", 1, [], dict(wiring), [*upstream, "agent"])
    return [*services, agent, gateway]


def code_sandbox_env(kind: CodeSandbox, sandbox_url: str | None, token: str | None) -> dict[str, str]:
    """Settings of the `code` resources service for where its sandboxes run."""
    if kind == "service":
        return {
            "ROLLGATE_SANDBOX__PROVIDER": "remote",
            "ROLLGATE_SANDBOX__URL": str(sandbox_url),
            "ROLLGATE_SANDBOX__TOKEN": str(token),
        }
    if kind == "kubernetes":
        return {"ROLLGATE_SANDBOX__PROVIDER": "kubernetes"}
    return {}


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
