"""Run one child process with a wall-clock limit and bounded output capture, without blocking the
event loop. Shared by every provider: the local provider runs the sandboxed command itself, the
Docker and Kubernetes providers run `docker exec` / `kubectl exec` through it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Sequence

from rollgate.sandbox.base import ExecResult

log = logging.getLogger(__name__)

_CHUNK = 64 * 1024
# Output beyond this many times the kept size means the program only floods: stop it early
# instead of burning CPU on both sides until the wall clock runs out.
_FLOOD_FACTOR = 16


class _Capture:
    def __init__(self, keep: int, flood: asyncio.Event):
        self.keep = keep
        self.buf = bytearray()
        self.total = 0
        self.flood = flood

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while True:
            chunk = await stream.read(_CHUNK)
            if not chunk:
                return
            self.total += len(chunk)
            room = self.keep - len(self.buf)
            if room > 0:
                self.buf += chunk[:room]
            if self.total > self.keep * _FLOOD_FACTOR:
                self.flood.set()

    def text(self) -> str:
        return self.buf.decode("utf-8", errors="replace")

    @property
    def truncated(self) -> bool:
        return self.total > self.keep


async def _feed(stream: asyncio.StreamWriter | None, data: bytes) -> None:
    if stream is None:
        return
    # The child may exit (or close stdin) before reading everything: that is its business.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if data:
            stream.write(data)
            await stream.drain()
        stream.close()
        await stream.wait_closed()


def killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def kill_children_first(pid: int) -> None:
    """SIGKILL the children of `pid` (a namespace launcher such as `unshare --fork`), not `pid` itself:
    the launcher then reaps its child and exits. Killing the launcher first would orphan the child to
    the host's init, which (in some containers) never reaps it: a zombie that still counts against
    the sandbox uid's process limit. Falls back to the process group when there are no children."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        children = []
    for child in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)
    if not children:
        killpg(pid)


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return str(num)


def signal_reason(sig: int, unexplained_sigkill: str = "signal:SIGKILL") -> str:
    """The `killed_by` of a program that died of signal `sig` (the limits' signals named)."""
    if sig == signal.SIGKILL:
        return unexplained_sigkill
    if sig == signal.SIGXCPU:
        return "cpu_limit"
    if sig == signal.SIGXFSZ:
        return "file_size_limit"
    return f"signal:{_signal_name(sig)}"


async def run_bounded(
    argv: Sequence[str],
    *,
    stdin: bytes = b"",
    timeout_s: float,
    max_output_bytes: int,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    sweep: Callable[[], Awaitable[None]] | None = None,
    unexplained_sigkill: str = "signal:SIGKILL",
    grace_s: float = 0.5,
    kill_tree: Callable[[int], None] = killpg,
    pass_fds: Sequence[int] = (),
) -> ExecResult:
    """Run `argv` in a new session (its own process group). On timeout or output flood the whole
    group is SIGKILLed and `sweep` (e.g. "kill every process of the sandbox uid") runs too, so
    nothing the program started survives. `sweep` also runs after a normal exit when output pipes
    stay open (a daemon holding them)."""
    start = time.monotonic()
    flood = asyncio.Event()
    out, err = _Capture(max_output_bytes, flood), _Capture(max_output_bytes, flood)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
        pass_fds=pass_fds,
    )
    assert proc.stdout is not None and proc.stderr is not None
    readers = [asyncio.ensure_future(out.drain(proc.stdout)), asyncio.ensure_future(err.drain(proc.stderr))]
    feeder = asyncio.ensure_future(_feed(proc.stdin, stdin))
    waiter = asyncio.ensure_future(proc.wait())
    flooded = asyncio.ensure_future(flood.wait())
    killed_by: str | None = None
    timed_out = False

    async def kill() -> None:
        kill_tree(proc.pid)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout=2.0)
        except TimeoutError:
            killpg(proc.pid)
        if sweep is not None:
            await sweep()

    try:
        await asyncio.wait({waiter, flooded}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if not waiter.done():
            if flood.is_set():
                killed_by = "output_limit"
            else:
                killed_by, timed_out = "timeout", True
            await kill()
        await waiter
        # The direct child is gone; its pipes close unless something it started still holds them.
        _, pending = await asyncio.wait(readers, timeout=grace_s)
        if pending:
            await kill()
            _, pending = await asyncio.wait(readers, timeout=grace_s)
            for task in pending:
                task.cancel()
        elif sweep is not None:
            await sweep()
    except BaseException:
        # Cancelled (or failed) while the child runs: never leave it behind (the launcher exits
        # by itself once its child is gone).
        if proc.returncode is None:
            kill_tree(proc.pid)
        raise
    finally:
        for task in (*readers, feeder, flooded):
            if not task.done():
                task.cancel()
    rc = proc.returncode
    exit_code: int | None = rc
    if rc is not None and rc < 0:
        exit_code = None
        if killed_by is None:
            killed_by = signal_reason(-rc, unexplained_sigkill)
    elif killed_by is not None:
        exit_code = None
    return ExecResult(
        exit_code=exit_code,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        killed_by=killed_by,
        duration_s=round(time.monotonic() - start, 4),
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
    )
