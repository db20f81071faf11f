"""A multi-role job checked at submission (docs/roles.md): every role of the environment mapped
to a policy the workers can run, nothing else; a 400 naming the role and what is accepted."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rollgate.agent_server.agent import AGENT_NAME
from rollgate.agent_server.role_policy import check_role_policy, check_roles, refuse_harness_sampling
from rollgate.core.errors import BadRequest, NotFound

if TYPE_CHECKING:
    from rollgate.resources_servers.base import Environment
    from rollgate.resources_servers.registry import EnvRegistry

COMPONENT = "gateway"


def env_class(env: str, registry: EnvRegistry | None) -> type[Environment] | None:
    """The class of `env` in the gateway's registry, or None when it knows none (an environment
    served only by remote replicas, or no registry given): checks that need the class are then
    left to the worker that runs it."""
    if registry is None:
        return None
    try:
        return registry.get(env).env_class
    except NotFound:
        return None


def declared_roles(env: str, registry: EnvRegistry | None) -> tuple[str, ...] | None:
    """The roles an environment declares (() for a single-role one), or None when its class is not
    known here (`env_class`)."""
    cls = env_class(env, registry)
    return None if cls is None else tuple(getattr(cls, "roles", ()) or ())


def check_job_roles(req: Any, known_models: list[str], role_agents: Sequence[str] = ()) -> dict[str, Any] | None:
    """The job's roles as they ride on each task, after the checks that need no environment.
    `role_agents`: the agents besides the shipped loop that may play a role (the harness agents)."""
    if not req.roles:
        return None
    if req.purpose == "eval":
        for name in ("threshold", "pass_k"):
            if getattr(req, name) is not None:
                raise BadRequest(
                    f"{name}: an evaluation job with roles is scored by play (each role's wins, draws and losses "
                    f"with intervals), not by a threshold or pass@k; leave {name} out",
                    component=COMPONENT,
                    field=name,
                )
    if req.agent not in (None, AGENT_NAME):
        raise BadRequest(
            f"agent: a job with roles runs the {AGENT_NAME!r} loop; name each role's agent in roles.<role>.agent",
            component=COMPONENT,
            field="agent",
        )
    for role, policy in req.roles.items():
        check_role_policy(role, policy, known_models, agents=role_agents, component=COMPONENT)
        if policy.agent not in (None, AGENT_NAME):
            overrides = {**req.sampling.model_dump(exclude_none=True), **policy.sampling.model_dump(exclude_none=True)}
            whose = "the job's or the role's"
            refuse_harness_sampling(f"roles.{role}.sampling", policy.agent, overrides, whose=whose, component=COMPONENT)
    return {role: policy.model_dump(exclude_none=True) for role, policy in req.roles.items()}


def check_env_roles(env: str, roles: dict[str, Any] | None, *, where: str, registry: EnvRegistry | None) -> None:
    declared = declared_roles(env, registry)
    if declared is None:
        return
    if declared and not roles:
        raise BadRequest(
            f"roles: {env} has roles {', '.join(declared)}: map each to a policy in `roles` (docs/roles.md)",
            component=COMPONENT,
            field="roles",
        )
    if roles and not declared:
        raise BadRequest(
            f"{where}.env: {env} has a single role; a job with `roles` needs a multi-role environment",
            component=COMPONENT,
            field=f"{where}.env",
        )
    if roles:
        check_roles(list(declared), roles, env=env, component=COMPONENT)
