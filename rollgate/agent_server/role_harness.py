"""A harness agent playing one role of a multi-role episode (docs/roles.md), as the roles loop
(rollgate.agent_server.roles) sees it. The loop knows harnesses only through these protocols (the
harness package, rollgate.agent_server.harness.seat, implements them), so it imports no harness
code.

A harness seat is one process per role and episode, started when its role first has the turn (its
prompt then holds that first observation), playing through the session's MCP endpoint in step
mode (`?role=R&wait=S`: each move returns once the turn is back, with the other roles' moves).
While it is the harness role's turn the loop only watches: it peeks at whose turn it is every poll
interval until the turn moves on, the game ends, or the harness exits or runs out of budget."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rollgate.agent_server.episode import Episode, EpisodeFailure, Phase, failure
from rollgate.core.rows import Task
from rollgate.core.schemas import RolePolicy, RoleView, Turn
from rollgate.resources_servers.client import EnvClient

Peek = Callable[[], Awaitable[str | None]]
END_GRACE_S = 1.0  # at the game's end, how long a harness may take to exit by itself before it is stopped


@dataclass
class SeatRecord:
    """What a harness seat leaves for its role's trajectory."""

    turns: list[Turn] = field(default_factory=list)
    output: list[dict[str, Any]] = field(default_factory=list)  # its calls' assistant items
    final_text: str = ""
    segmented: bool = False
    metrics: dict[str, Any] = field(default_factory=dict)
    model_s: float = 0.0


class HarnessPlayer(Protocol):
    """One harness process playing one role (rollgate.agent_server.harness.seat.HarnessSeat)."""

    @property
    def started(self) -> bool: ...

    async def start(self, observation: str) -> None:
        """Start the harness with its first observation in its prompt (EpisodeFailure if it cannot)."""
        ...

    async def play(self, peek: Peek) -> tuple[str | None, bool]:
        """Watch it while it is its turn -> (whose turn now, whether the game stops unfinished: it
        exited or ran out of budget). A crash, a flood, a cancel or the wall clock: EpisodeFailure."""
        ...

    async def finish(self, *, grace_s: float = 0.0, strict: bool = False) -> SeatRecord:
        """Stop it (after `grace_s` for it to exit by itself) and everything it started, take its
        capture record; idempotent. `strict`: a harness that had crashed is an EpisodeFailure."""
        ...


@runtime_checkable
class RoleHarness(Protocol):
    """An agent that can play a role (a HarnessAgent)."""

    def check_role(self, where: str, policy: RolePolicy, sampling: Mapping[str, Any]) -> None:
        """A 400 naming `<where>.<field>` for what the harness cannot honour (sampling, another model)."""
        ...

    def role_seat(
        self,
        role: str,
        task: Task,
        policy: RolePolicy,
        *,
        session_id: str,
        tools: list[dict[str, Any]],
        ctx: Any,
        deadline: float,
    ) -> HarnessPlayer: ...


class RolePlayers(Protocol):
    """The agents besides the shipped loop that can play a role (rollgate.agent_server.plugins)."""

    def names(self) -> list[str]: ...

    def get(self, name: str) -> RoleHarness: ...


async def harness_turn(
    player: HarnessPlayer, ep: Episode, env: EnvClient, sid: str, role: str, timeout_s: float
) -> tuple[str | None, bool]:
    """The harness role's turn: start it on its first, then watch until the turn moves on."""

    async def peek() -> str | None:
        try:
            return (await env.observe(sid, role, timeout_s=timeout_s, peek=True)).turn
        except Exception as exc:  # noqa: BLE001 - every failure becomes a typed outcome
            raise failure(exc, Phase.tool) from None

    if not player.started:
        view = await observe_into(ep, env, sid, role, timeout_s)
        if view.turn != role:
            return view.turn, False
        await player.start(view.observation)
    return await player.play(peek)


async def observe_into(ep: Episode, env: EnvClient, sid: str, role: str, timeout_s: float) -> RoleView:
    """What `role` sees now, added to its episode as a user turn (a failure: typed, Phase.tool)."""
    try:
        view = await env.observe(sid, role, timeout_s=timeout_s)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a typed outcome
        raise failure(exc, Phase.tool) from None
    if view.observation:
        ep.add_input([{"role": "user", "content": view.observation}])
    return view


def take(ep: Episode, record: SeatRecord) -> None:
    """A harness seat's record into its role's Episode (what becomes its trajectory)."""
    ep.turns = list(record.turns)
    ep.messages.extend(record.output)
    ep.final_text = record.final_text
    ep.timings.model_s = record.model_s


async def finish_all(players: Mapping[str, HarnessPlayer], *, strict: bool) -> dict[str, SeatRecord]:
    """Every started harness stopped (concurrently: each may sit in a waiting MCP call) and its
    record taken. `strict` (the game ended): the first crash raises, after all are stopped;
    otherwise (an episode failing anyway) failures are swallowed."""
    started = {role: p for role, p in players.items() if p.started}
    grace = END_GRACE_S if strict else 0.0
    results = await asyncio.gather(
        *(p.finish(grace_s=grace, strict=strict) for p in started.values()), return_exceptions=True
    )
    records: dict[str, SeatRecord] = {}
    first: BaseException | None = None
    for role, result in zip(started, results, strict=True):
        if isinstance(result, BaseException):
            if first is None:
                first = result
                if isinstance(result, EpisodeFailure):
                    result.error.message = f"role {role}: {result.error.message}"
            with contextlib.suppress(Exception):  # a crash is raised once: its record as it was taken
                records[role] = await started[role].finish()
        else:
            records[role] = result
    if strict and first is not None:
        raise first
    return records
