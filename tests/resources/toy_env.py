"""A deliberately small environment used to test the base machinery itself (the shipped
environments have their own tests)."""

from __future__ import annotations

import random
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from rollgate.core.schemas import TaskRow, VerifyRequest, VerifyResult
from rollgate.resources_servers.base import Environment, ToolError, final_response_text, tool


class CounterState(BaseModel):
    value: int = 0
    target: int = 0
    history: list[str] = Field(default_factory=list)


class CounterEnv(Environment):
    name = "counter"
    State = CounterState

    def seed(self, task: TaskRow, rng: random.Random):
        target = int(task.env_fields.get("target", rng.randint(1, 9)))
        return CounterState(target=target), f"reach {target}"

    @tool
    def add(
        self,
        state: CounterState,
        amount: Annotated[int, Field(ge=1, le=5, description="how much to add")],
        note: str = "",
    ) -> str:
        """Add an amount (1..5) to the counter.

        Longer text that is not part of the description."""
        if state.value + amount > 20:
            raise ToolError("the counter cannot pass 20")
        state.value += amount
        state.history.append(f"+{amount}{note}")
        return f"value={state.value}"

    @tool
    def reset(self, state: CounterState, mode: Literal["zero", "target"] = "zero") -> dict:
        """Reset the counter."""
        state.value = 0 if mode == "zero" else state.target
        return {"value": state.value}

    @tool(blocking=True)
    def slow_read(self, state: CounterState) -> int:
        """Read the counter from a worker thread."""
        return state.value

    def verify(self, state: CounterState, request: VerifyRequest) -> VerifyResult:
        hit = 1.0 if state.value == state.target else 0.0
        said = 0.5 if final_response_text(request).strip() == str(state.target) else 0.0
        return VerifyResult(reward=hit + said, reward_components={"state": hit, "answer": said})
