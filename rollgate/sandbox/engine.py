"""A sandbox that lives in a container engine and is driven through its CLI (`docker exec`,
`kubectl exec`). The Docker and Kubernetes providers differ only in how a sandbox is created,
entered and removed; everything after that is here."""

from __future__ import annotations

import base64
import binascii
import io
import logging
import shlex
import tarfile
from collections.abc import Mapping, Sequence

from rollgate.core.metrics import Metrics
from rollgate.sandbox.base import ExecResult, SandboxError, SandboxLimits, as_bytes, check_exec_args
from rollgate.sandbox.files import relative_parts
from rollgate.sandbox.process import run_bounded

log = logging.getLogger(__name__)

WORKDIR = "/work"
CODE_FILE = "_rollgate_exec.py"
# Engine round trips (exec setup, image pulls are not counted: the sandbox already runs).
_ENGINE_SLACK_S = 15.0


def container_path(path: str) -> str:
    """The absolute in-container path of a work-dir-relative `path` (same rules as the local provider)."""
    return WORKDIR + "/" + "/".join(relative_parts(path))


async def run_engine(argv: Sequence[str], *, stdin: bytes = b"", timeout_s: float = 120.0, what: str) -> ExecResult:
    """Run an engine command (create, delete, apply) whose failure is a SandboxError."""
    try:
        r = await run_bounded(argv, stdin=stdin, timeout_s=timeout_s, max_output_bytes=64 * 1024)
    except FileNotFoundError as exc:
        raise SandboxError(f"{what}: {argv[0]!r} not found on PATH ({exc})") from None
    if not r.ok:
        raise SandboxError(f"{what} failed ({r.summary()}): {r.stderr.strip()[-500:]}")
    return r


class CliSandbox:
    """`exec_prefix` enters the sandbox (e.g. `docker exec -i -w /work NAME`); `destroy_argv` removes it."""

    def __init__(
        self,
        sandbox_id: str,
        exec_prefix: list[str],
        destroy_argv: list[str],
        limits: SandboxLimits,
        metrics: Metrics | None = None,
        python: str = "python3",
    ):
        self.id = sandbox_id
        self.exec_prefix = exec_prefix
        self.destroy_argv = destroy_argv
        self.limits = limits
        self.metrics = metrics if metrics is not None else Metrics.off()
        self.python = python
        self._destroyed = False

    def exec_argv(self, cmd: Sequence[str], timeout_s: float) -> list[str]:
        # `timeout -s KILL` inside the sandbox bounds the run even if the engine connection drops.
        return [*self.exec_prefix, "timeout", "-s", "KILL", f"{timeout_s:g}s", *cmd]

    async def exec(
        self,
        cmd: Sequence[str] | None = None,
        *,
        code: str | None = None,
        stdin: str | bytes = b"",
        timeout_s: float | None = None,
    ) -> ExecResult:
        check_exec_args(cmd, code)
        if self._destroyed:
            raise SandboxError(f"sandbox {self.id} was destroyed", field="sandbox")
        timeout = timeout_s or self.limits.timeout_s
        if code is not None:
            await self.write_file(CODE_FILE, code)
            cmd = [self.python, "-E", "-s", "-B", CODE_FILE]
        r = await run_bounded(
            self.exec_argv(list(cmd), timeout),
            stdin=as_bytes(stdin),  # type: ignore[arg-type]
            timeout_s=timeout + _ENGINE_SLACK_S,
            max_output_bytes=self.limits.max_output_bytes,
        )
        if r.exit_code == 137 and r.duration_s >= timeout:  # `timeout -s KILL` fired inside
            r = r.model_copy(update={"exit_code": None, "timed_out": True, "killed_by": "timeout"})
        # Processes the run left behind (daemons) die now; the container's PID 1 is immune.
        await run_bounded([*self.exec_prefix, "kill", "-9", "-1"], timeout_s=_ENGINE_SLACK_S, max_output_bytes=4096)
        self.metrics.sandbox_execs.labels(result=r.label).inc()
        return r

    async def write_file(self, path: str, data: str | bytes) -> None:
        payload = as_bytes(data)
        if len(payload) > self.limits.max_file_bytes:
            raise SandboxError(f"file {path!r} is larger than {self.limits.max_file_bytes} bytes", field="data")
        target = container_path(path)
        script = f'mkdir -p "$(dirname {shlex.quote(target)})" && cat > {shlex.quote(target)}'
        await run_engine([*self.exec_prefix, "sh", "-c", script], stdin=payload, what=f"write {path}")

    async def write_files(self, files: Mapping[str, str | bytes]) -> None:
        """Several files in one engine round trip: a tar stream unpacked in the work dir."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path, data in files.items():
                payload = as_bytes(data)
                if len(payload) > self.limits.max_file_bytes:
                    raise SandboxError(f"file {path!r} is larger than {self.limits.max_file_bytes} bytes", field="data")
                info = tarfile.TarInfo("/".join(relative_parts(path)))
                info.size, info.mode = len(payload), 0o644
                tar.addfile(info, io.BytesIO(payload))
        argv = [*self.exec_prefix, "tar", "-x", "-m", "--no-same-owner", "-f", "-", "-C", WORKDIR]
        await run_engine(argv, stdin=buf.getvalue(), what=f"write {len(files)} files")

    async def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        cap = max_bytes or self.limits.max_file_bytes
        # base64: the captured stdout is text, the file may not be.
        script = f"head -c {cap} -- {shlex.quote(container_path(path))} | base64 -w0"
        r = await run_bounded(
            [*self.exec_prefix, "sh", "-c", script], timeout_s=_ENGINE_SLACK_S, max_output_bytes=cap * 4 // 3 + 16
        )
        if not r.ok or r.stderr.strip():
            raise SandboxError(f"cannot read {path!r}: {r.stderr.strip()[-300:]}", field="path")
        try:
            return base64.b64decode(r.stdout, validate=True)
        except binascii.Error as exc:
            raise SandboxError(f"cannot read {path!r}: garbled transfer ({exc})", field="path") from None

    async def destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        try:
            await run_engine(self.destroy_argv, what=f"remove sandbox {self.id}")
        except SandboxError as exc:
            log.warning("sandbox %s not removed: %s", self.id, exc)
