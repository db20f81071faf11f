"""The record of one running episode, and how a failure ends it.

`Episode` accumulates what becomes the Trajectory (the readable transcript, the history sent to
the model, token turns, timings, its counters). `EpisodeFailure` ends an episode early with a typed
outcome; `failure(exc, phase)` maps whatever a part raised to it, so no error leaves an episode
untyped.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any

from rollgate.agent_server import items as it
from rollgate.core.errors import RollgateError
from rollgate.core.items import Item
from rollgate.core.schemas import ErrorInfo, ErrorKind, Outcome, Timings, Turn

log = logging.getLogger("rollgate.agent")


class Phase(enum.StrEnum):
    """Where in an episode a part was called (what a failure there is blamed on)."""

    seed = "seed"
    model = "model"
    tool = "tool"
    verify = "verify"


# A failure's component and outcome by phase: only the model's failures are model_error.
_COMPONENT = {Phase.seed: "env", Phase.model: "model", Phase.tool: "env", Phase.verify: "verify"}


class EpisodeFailure(Exception):
    """Ends an episode early with an error outcome (raised inside the loop only)."""

    def __init__(self, outcome: Outcome, error: ErrorInfo):
        super().__init__(error.message)
        self.outcome = outcome
        self.error = error


def failure(exc: BaseException, phase: Phase) -> EpisodeFailure:
    """Map an exception raised while talking to a part to the episode's outcome."""
    component = _COMPONENT[phase]
    outcome = Outcome.model_error if phase is Phase.model else Outcome.env_error
    if isinstance(exc, RollgateError):
        info = exc.info()
        info.component = component if info.component in ("rollgate", "store") else info.component
        return EpisodeFailure(outcome, info)
    if isinstance(exc, TimeoutError):
        return EpisodeFailure(
            outcome,
            ErrorInfo(kind=ErrorKind.timeout, component=component, message=f"{phase} call exceeded its timeout"),
        )
    log.exception("unexpected error during %s", phase)
    return EpisodeFailure(
        outcome,
        ErrorInfo(kind=ErrorKind.internal, component="agent", message=f"{phase}: {type(exc).__name__}: {exc}"),
    )


@dataclass(slots=True)
class EpisodeCounters:
    """The agent's own counters of one episode; `as_metrics()` is their part of Trajectory.metrics
    (environments add their own keys there, so the wire stays a free dict)."""

    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    token_drift: int = 0  # turns whose prompt did not extend the previous turn's tokens
    output_tokens: int = 0
    context_exhausted: bool = False  # the conversation outgrew the model's context window

    def as_metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "tool_errors": self.tool_errors,
            "token_drift": self.token_drift,
        }
        if self.context_exhausted:  # written only when it happened, as before
            out["context_exhausted"] = True
        out["output_tokens"] = self.output_tokens
        return out


class Episode:
    """The mutable record of one running episode (what becomes the Trajectory)."""

    def __init__(self):
        self.messages: list[Item] = []  # readable transcript
        self.history: list[Item] = []  # what the model is sent (token fields on the last call only)
        self._token_items: list[int] = []
        self.turns: list[Turn] = []
        self.timings = Timings()
        self.counters = EpisodeCounters()
        self.final_text = ""
        self.session_id: str | None = None

    def add_input(self, items: list[Item]) -> None:
        self.history.extend(items)
        self.messages.extend(it.readable(i) for i in items)

    def add_model_output(self, output: list[Item]) -> None:
        # Only the newest call's items need their token ids (the server extends from the last
        # one), so older copies are dropped: the request grows with the text, not with tokens.
        for idx in self._token_items:
            self.history[idx] = it.readable(self.history[idx])
        start = len(self.history)
        self.history.extend(output)
        self._token_items = [start + i for i, item in enumerate(output) if "prompt_token_ids" in item]
        self.messages.extend(it.readable(i) for i in output)
