"""An environment that failed to start, kept in place of the real one.

A stack that leaves a broken environment out (one unreachable server must not take the others
down) would turn every row naming it into "unknown environment", with the cause only in the log.
Kept as this stand-in, its rows are accepted and each episode ends at its seed as env_error
saying the environment failed to start and why. Restart the service once the cause is fixed."""

from __future__ import annotations

import random

from pydantic import BaseModel

from rollgate.core.errors import UpstreamError
from rollgate.core.schemas import TaskRow, VerifyRequest, VerifyResult
from rollgate.core.session_store import MemorySessionStore
from rollgate.resources_servers.base import Environment, EnvRuntime


class _NoState(BaseModel):
    pass


class FailedEnvironment(Environment):
    State = _NoState
    description = "failed to start"

    def __init__(self, name: str, cause: str):
        self.name = name  # type: ignore[misc] - per instance: it stands in for any environment
        self.cause = cause

    def error(self) -> UpstreamError:
        return UpstreamError(
            f"environment {self.name!r} failed to start: {self.cause} (it starts again with the service)",
            component=f"env:{self.name}",
        )

    def seed(self, task: TaskRow, rng: random.Random) -> BaseModel:
        raise self.error()

    def verify(self, state: BaseModel, request: VerifyRequest) -> VerifyResult:
        raise self.error()  # never reached: no session is ever seeded


def failed_runtime(name: str, exc: BaseException) -> EnvRuntime:
    cause = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return EnvRuntime(FailedEnvironment(name, f"{type(exc).__name__}: {cause}"), MemorySessionStore())
