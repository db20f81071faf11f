"""The record of one running episode, and how a failure ends it.

`Episode` accumulates what becomes the Trajectory (the readable transcript, the history sent to
the model, token turns, timings). `EpisodeFailure` ends an episode early with a typed outcome;
`failure(exc, phase)` maps whatever a part raised to it, so no error leaves an episode untyped.
"""

from __future__ import annotations

import logging
from typing import Any

from rollgate.agent_server import items as it
from rollgate.core.errors import RollgateError
from rollgate.core.schemas import ErrorInfo, ErrorKind, Outcome, Timings, Turn

log = logging.getLogger("rollgate.agent")


class EpisodeFailure(Exception):
    """Ends an episode early with an error outcome (raised inside the loop only)."""

    def __init__(self, outcome: Outcome, error: ErrorInfo):
        super().__init__(error.message)
        self.outcome = outcome
        self.error = error


def failure(exc: BaseException, phase: str) -> EpisodeFailure:
    """Map an exception raised while talking to a part to the episode's outcome."""
    component = "model" if phase == "model" else ("verify" if phase == "verify" else "env")
    outcome = Outcome.model_error if phase == "model" else Outcome.env_error
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


class Episode:
    """The mutable record of one running episode (what becomes the Trajectory)."""

    def __init__(self):
        self.messages: list[dict[str, Any]] = []  # readable transcript
        self.history: list[dict[str, Any]] = []  # what the model is sent (token fields on the last call only)
        self._token_items: list[int] = []
        self.turns: list[Turn] = []
        self.timings = Timings()
        self.output_tokens = 0
        self.metrics: dict[str, Any] = {"turns": 0, "tool_calls": 0, "tool_errors": 0, "token_drift": 0}
        self.final_text = ""
        self.session_id: str | None = None

    def add_input(self, items: list[dict[str, Any]]) -> None:
        self.history.extend(items)
        self.messages.extend(it.readable(i) for i in items)

    def add_model_output(self, output: list[dict[str, Any]]) -> None:
        # Only the newest call's items need their token ids (the server extends from the last
        # one), so older copies are dropped: the request grows with the text, not with tokens.
        for idx in self._token_items:
            self.history[idx] = it.readable(self.history[idx])
        start = len(self.history)
        self.history.extend(output)
        self._token_items = [start + i for i, item in enumerate(output) if "prompt_token_ids" in item]
        self.messages.extend(it.readable(i) for i in output)
