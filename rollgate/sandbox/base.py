"""The sandbox contract: a provider creates sandboxes; a sandbox runs commands in isolation.

Every provider (local processes, Docker, Kubernetes) implements the same small interface, so the
code environment never knows which one runs its code. A failed or killed run is a normal
`ExecResult` (the model reads it), never an exception; exceptions (`SandboxError`) mean the
sandbox machinery itself failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from rollgate.core.errors import BadRequest, RollgateError


class SandboxError(RollgateError):
    """The sandbox machinery failed (could not start, provider unreachable): not the user's code."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message, component="sandbox", field=field)


class SandboxLimits(BaseModel):
    """Resource limits of one execution (local provider: rlimits + wall clock; others: engine limits)."""

    timeout_s: float = Field(10.0, gt=0, le=3600, description="wall clock of one exec")
    cpu_s: int = Field(10, ge=1, le=3600, description="CPU seconds of one exec")
    memory_bytes: int = Field(512 * 2**20, ge=32 * 2**20, description="address space (local) / memory limit")
    max_procs: int = Field(64, ge=1, le=4096, description="processes + threads of the sandbox user")
    max_file_bytes: int = Field(16 * 2**20, ge=1024, description="largest file one exec may write")
    max_open_files: int = Field(256, ge=16, le=65536)
    max_output_bytes: int = Field(64 * 1024, ge=256, description="stdout / stderr kept, each")
    max_workdir_bytes: int = Field(64 * 2**20, ge=1024, description="work dir quota, checked after each exec")
    tmpfs_bytes: int = Field(64 * 2**20, ge=1024 * 1024, description="private /tmp size (namespaced runs)")


class ExecResult(BaseModel):
    """The outcome of one execution, as the model and the verifier see it."""

    exit_code: int | None = Field(description="process exit status; None when it was killed by a signal")
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    killed_by: str | None = Field(None, description="timeout | cpu_limit | output_limit | signal:NAME | ...")
    duration_s: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and self.killed_by is None

    @property
    def label(self) -> str:
        """The result label of the sandbox-executions metric: timeout | killed | ok | error."""
        if self.timed_out:
            return "timeout"
        if self.killed_by:
            return "killed"
        return "ok" if self.exit_code == 0 else "error"

    def summary(self) -> str:
        """A short human-readable status line (what the model reads first)."""
        if self.timed_out:
            return f"killed: wall-clock timeout after {self.duration_s:.1f}s"
        if self.killed_by:
            return f"killed: {self.killed_by}"
        return f"exit code {self.exit_code}"


@runtime_checkable
class Sandbox(Protocol):
    """One isolated work area. `exec` runs a command (argv) or Python source (`code`) in it."""

    id: str

    async def exec(
        self,
        cmd: Sequence[str] | None = None,
        *,
        code: str | None = None,
        stdin: str | bytes = b"",
        timeout_s: float | None = None,
    ) -> ExecResult: ...

    async def write_file(self, path: str, data: str | bytes) -> None: ...

    async def read_file(self, path: str, max_bytes: int | None = None) -> bytes: ...

    async def destroy(self) -> None: ...


@runtime_checkable
class SandboxProvider(Protocol):
    name: str

    async def create(self) -> Sandbox: ...

    def capabilities(self) -> dict[str, Any]: ...

    async def close(self) -> None: ...


def check_exec_args(cmd: Sequence[str] | None, code: str | None) -> None:
    """Exactly one of `cmd` / `code`; a clear error naming the field otherwise."""
    if (cmd is None) == (code is None):
        raise BadRequest(
            "pass exactly one of cmd (argv list) or code (Python source)", component="sandbox", field="cmd"
        )
    if cmd is not None:
        if isinstance(cmd, (str, bytes)) or not cmd or not all(isinstance(a, str) for a in cmd):
            raise BadRequest("cmd must be a non-empty list of strings (argv)", component="sandbox", field="cmd")
        if any("\0" in a for a in cmd):
            raise BadRequest("cmd arguments must not contain NUL bytes", component="sandbox", field="cmd")


def as_bytes(data: str | bytes) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else bytes(data)
