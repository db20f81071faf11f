"""OpenEnv environments written against OpenEnv's own interfaces (`openenv` 0.10), for the tests
of the `openenv` kind. Importing this module imports `openenv.core` (seconds): tests name these
classes as "tests.interop.openenv_envs:..." strings or import the module inside a fixture.

- CounterEnvironment: a plain Environment. Reset draws a target from the seed; each step adds
  `amount`; a step that hits the target pays 1.0 and ends the episode, any other costs 0.1.
- FaultyCounter: the same, with faults on magic amounts: 97 raises, 98 hangs 3 s, 99 kills the
  whole server process (serve it in a subprocess for that one).
- NotesEnvironment: an MCPEnvironment with FastMCP tools; `submit` pays 1.0 when the number of
  notes is the seeded target and ends the episode; `refuse` is a tool that raises.

`counter_app` / `notes_app` are OpenEnv's own server (`create_app`) for each.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

from fastmcp import FastMCP
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class CounterAction(Action):
    """Add `amount` to the counter."""

    amount: int = Field(..., description="how much to add (may be negative)")


class CounterObservation(Observation):
    total: int = 0
    target: int = 0


class CounterEnvironment(Environment[CounterAction, CounterObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True
    resets = 0  # class-wide counts: the invariant tests check that no tool call reaches these
    closes = 0

    def __init__(self) -> None:
        super().__init__()
        self._state = State()
        self.total = 0
        self.target = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> CounterObservation:
        CounterEnvironment.resets += 1
        self._state = State(episode_id=episode_id)
        self.total = 0
        self.target = int(kwargs.get("target") or random.Random(seed).randint(3, 9))
        return CounterObservation(total=0, target=self.target)

    def step(self, action: CounterAction, timeout_s: float | None = None, **kwargs: Any) -> CounterObservation:
        self._state.step_count += 1
        self.total += action.amount
        hit = self.total == self.target
        return CounterObservation(total=self.total, target=self.target, reward=1.0 if hit else -0.1, done=hit)

    @property
    def state(self) -> State:
        return self._state

    def close(self) -> None:
        CounterEnvironment.closes += 1


class FaultyCounter(CounterEnvironment):
    def step(self, action: CounterAction, timeout_s: float | None = None, **kwargs: Any) -> CounterObservation:
        if action.amount == 97:
            raise RuntimeError("the counter broke")
        if action.amount == 98:
            time.sleep(3.0)
        if action.amount == 99:
            os._exit(3)  # the server process dies mid-episode
        return super().step(action, timeout_s=timeout_s, **kwargs)


class NotesEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("notes")
        self.notes: list[str] = []
        self.target = 0

        @mcp.tool
        def add_note(text: str) -> str:
            """Write a note."""
            self.notes.append(text)
            return f"{len(self.notes)} notes"

        @mcp.tool
        def submit() -> str:
            """Hand in the notes."""
            return "submitted"

        @mcp.tool
        def refuse() -> str:
            """A tool that always fails."""
            raise ValueError("the notebook refuses")

        super().__init__(mcp)
        self._state = State()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Observation:
        self.notes = []
        self.target = random.Random(seed).randint(1, 3)
        self._state = State(episode_id=episode_id)
        return Observation(metadata={"task": f"write {self.target} notes, then submit"})

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        obs = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, CallToolAction) and action.tool_name == "submit":
            obs.reward = 1.0 if len(self.notes) == self.target else 0.0
            obs.done = True
        return obs

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return Observation(metadata={"error": f"unknown action {type(action).__name__}"})

    @property
    def state(self) -> State:
        return self._state


counter_app = create_app(FaultyCounter, CounterAction, CounterObservation, env_name="counter", max_concurrent_envs=8)
notes_app = create_app(NotesEnvironment, CallToolAction, CallToolObservation, env_name="notes", max_concurrent_envs=8)
# OpenEnv's default: one session at a time (the second WebSocket gets CAPACITY_REACHED)
single_app = create_app(CounterEnvironment, CounterAction, CounterObservation, env_name="single", max_concurrent_envs=1)
