"""A multi-role job checked at submission (docs/roles.md): every role of the environment mapped
to a policy the workers can run, nothing else; a 400 naming the role and what is accepted."""

from __future__ import annotations

from typing import Any

from rollgate.agent_server.agent import AGENT_NAME
from rollgate.agent_server.roles import check_role_policy, check_roles
from rollgate.core.errors import BadRequest

COMPONENT = "gateway"


def declared_roles(env: str) -> tuple[str, ...] | None:
    """The roles an environment declares (() for a single-role one), or None when its class is not
    installed here (an environment served only by remote replicas: its worker checks the roles)."""
    try:
        from rollgate.resources_servers.registry import default_registry

        cls = default_registry().get(env).env_class
    except Exception:  # noqa: BLE001 - not installed here, or a broken plugin
        return None
    return tuple(getattr(cls, "roles", ()) or ())


def check_job_roles(req: Any, known_models: list[str]) -> dict[str, Any] | None:
    """The job's roles as they ride on each task, after the checks that need no environment."""
    if not req.roles:
        return None
    if req.purpose == "eval":
        raise BadRequest(
            'roles: evaluation jobs with roles are not supported yet; submit a "train" job (docs/roles.md)',
            component=COMPONENT,
            field="roles",
        )
    if req.agent not in (None, AGENT_NAME):
        raise BadRequest(
            f"agent: a job with roles runs the {AGENT_NAME!r} loop; name each role's agent in roles.<role>.agent",
            component=COMPONENT,
            field="agent",
        )
    for role, policy in req.roles.items():
        check_role_policy(role, policy, known_models, component=COMPONENT)
    return {role: policy.model_dump(exclude_none=True) for role, policy in req.roles.items()}


def check_env_roles(env: str, roles: dict[str, Any] | None, *, where: str) -> None:
    declared = declared_roles(env)
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
