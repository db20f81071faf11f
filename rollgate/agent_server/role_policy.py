"""What a multi-role job may map its roles to (docs/roles.md), checked by the agent, the gateway
at submission and `rollgate eval compare`: a 400 naming the field and what is accepted."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rollgate.agent_server.agent import AGENT_NAME
from rollgate.core.errors import BadRequest
from rollgate.core.schemas import RolePolicy

COMPONENT = "agent"


def check_role_policy(
    role: str,
    policy: RolePolicy,
    known_models: Iterable[str],
    *,
    agents: Iterable[str] = (),
    component: str = COMPONENT,
) -> None:
    """A role's model is one of `known_models` (none: the job's own) and its agent the shipped loop
    or one of `agents` (the harness agents able to play a role): else a 400 naming
    `roles.<role>.<field>` and what is accepted."""
    check_policy(f"roles.{role}", policy, known_models, agents=agents, component=component)


def check_policy(
    where: str,
    policy: RolePolicy,
    known_models: Iterable[str],
    *,
    agents: Iterable[str] = (),
    component: str = COMPONENT,
    hint: str = "",
) -> None:
    """A policy's model is one of `known_models` (none: the default) and its agent the shipped loop
    or one of `agents`: else a 400 naming `<where>.<field>` and what is accepted (`hint` follows
    the known models)."""
    known = set(known_models)
    if policy.model is not None and policy.model not in known:
        raise BadRequest(
            f"{where}.model: unknown model {policy.model!r}; known: {', '.join(sorted(known))}{hint}",
            component=component,
            field=f"{where}.model",
        )
    accepted = [AGENT_NAME, *sorted(set(agents) - {AGENT_NAME})]
    if policy.agent is not None and policy.agent not in accepted:
        why = (
            " (the shipped loop, or a harness agent: an `agents` entry of kind harness, smolagents or mini_swe_agent)"
            if len(accepted) > 1
            else " (harness agents play roles in rollout jobs only, not here)"
        )
        raise BadRequest(
            f"{where}.agent: {policy.agent!r} cannot play a role; accepted: {', '.join(accepted)}{why}",
            component=component,
            field=f"{where}.agent",
        )


def refuse_harness_sampling(
    field: str, harness: str, sampling: Mapping[str, Any], *, whose: str, component: str = COMPONENT
) -> None:
    """A harness chooses its own sampling: overrides set (`whose`: the job's, or the job's or the
    role's) cannot reach its model calls, a 400 naming `field`."""
    overrides = sorted(k for k, v in sampling.items() if v is not None)
    if overrides:
        raise BadRequest(
            f"{field}: the harness {harness!r} chooses its own sampling; {whose} overrides "
            f"({', '.join(overrides)}) cannot reach its model calls",
            component=component,
            field=field,
        )


def check_roles(declared: list[str], policies: Mapping[str, Any], *, env: str, component: str = COMPONENT) -> None:
    """Every declared role mapped, no other: a 400 naming the role and what is accepted."""
    for role in policies:
        if role not in declared:
            raise BadRequest(
                f"roles.{role}: {env} has no role {role!r}; roles: {', '.join(declared)}",
                component=component,
                field=f"roles.{role}",
            )
    missing = [r for r in declared if r not in policies]
    if missing:
        raise BadRequest(
            f"roles.{missing[0]}: role {missing[0]!r} of {env} has no policy; map every role: {', '.join(declared)}",
            component=component,
            field=f"roles.{missing[0]}",
        )
