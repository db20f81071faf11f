"""The rules of a multi-role environment's sessions (docs/roles.md).

The environment decides whose turn it is (`Environment.turn`); the runtime enforces it: a call
out of turn, or to a tool of another role, is a tool error naming the role and what is accepted
(the model reads it; the session is unchanged). A role that is not one of the environment's is
a 400 naming the accepted roles: that is the caller's mistake, not the model's. Each role sees
only what `Environment.observe` gives it (POST /sessions/{id}/observe, called by the agent,
never a tool the model can call); `peek` reads whose turn it is without marking anything seen.
"""

from __future__ import annotations

from typing import Any

from rollgate.core.errors import BadRequest
from rollgate.core.schemas import RoleView, ToolOutput
from rollgate.resources_servers.tools import ToolError, ToolSpec


def check_role(env: Any, role: str | None, *, component: str, field: str = "role") -> str:
    """`role` must be one of the environment's roles (a 400 naming them otherwise)."""
    if role not in env.roles:
        what = "names no role" if role is None else f"names role {role!r}"
        raise BadRequest(
            f"{field}: the call {what}; {env.name} has roles: {', '.join(env.roles)}",
            component=component,
            field=field,
        )
    return role  # type: ignore[return-value]


def tools_of(env: Any, role: str) -> list[str]:
    return [name for name, spec in env.tool_specs().items() if not spec.roles or role in spec.roles]


def role_tools(env: Any) -> dict[str, list[str]]:
    return {role: tools_of(env, role) for role in env.roles}


def refusal(env: Any, spec: ToolSpec, state: Any, role: str | None) -> ToolError | None:
    """Why `role` may not call `spec` now (None: it may)."""
    if spec.roles and role not in spec.roles:
        return ToolError(
            f"role {role!r} cannot call {spec.name!r} (a tool of {', '.join(spec.roles)}); "
            f"role {role!r} has: {', '.join(tools_of(env, role or '')) or 'no tools'}"
        )
    turn = env.turn(state)
    if turn is None:
        return ToolError("the episode is over: no role moves any more; reply with a short final message")
    if turn != role:
        return ToolError(f"it is not your turn: role {role!r} acted out of turn; it is {turn!r}'s turn")
    return None


def with_turn(env: Any, state: Any, out: ToolOutput) -> ToolOutput:
    turn = env.turn(state)
    return out.model_copy(update={"turn": turn, "done": turn is None})


async def observe(runtime: Any, session_id: str, role: str | None, *, peek: bool = False) -> RoleView:
    """`role`'s view of the session; `peek`: whose turn it is only (no observation), read without
    writing, so nothing is marked as seen (for whoever waits on a turn: the MCP step mode, a
    harness seat's runner)."""
    env = runtime.env
    if not env.roles:
        raise BadRequest(
            f"{env.name} has a single role: its observation comes with the seed and the tool outputs",
            component=runtime.component,
            field="role",
        )
    role = check_role(env, role, component=runtime.component)

    def look(record: dict[str, Any]) -> RoleView:
        state = env.State.model_validate(record["state"])
        text = env.observe(state, role)
        record["state"] = state.model_dump(mode="json")  # observe may mark what it showed as seen
        turn = env.turn(state)
        return RoleView(role=role, observation=text or "", turn=turn, done=turn is None)

    if peek:
        state = env.State.model_validate((await runtime.store.get(session_id))["state"])
        turn = env.turn(state)
        return RoleView(role=role, turn=turn, done=turn is None)
    return await runtime.store.update(session_id, look)
