"""One harness process: started in a session of its own (its own process group), its output
drained into bounded buffers, killed as a group.

The episode supervises it (rollgate.agent_server.harness.episode): it waits for the process, an
output flood, or its own events, and checks budgets in between. `finish()` always SIGKILLs the
whole group, also after a normal exit, so nothing a harness started outlives its episode (a
process that calls setsid() itself leaves the group: docs/agents.md says so)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass

_CHUNK = 64 * 1024


class Output:
    """One stream, bounded: its first and its last `keep` bytes, and how much there was."""

    def __init__(self, keep: int):
        self.keep = keep
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
        self.tail += chunk
        if len(self.tail) > 2 * self.keep:
            del self.tail[: len(self.tail) - self.keep]

    def first_lines(self, lines: int = 20, chars: int = 2000) -> str:
        text = self.head.decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[:lines])[:chars].strip()

    def last_text(self) -> str:
        """The end of the stream (the whole of it when it fit)."""
        data = self.head if self.total <= self.keep else self.tail[-self.keep :]
        return bytes(data).decode("utf-8", errors="replace")


@dataclass
class ProcessResult:
    pid: int
    exit_code: int | None  # None when a signal ended it
    signal: str | None
    duration_s: float
    stdout: Output
    stderr: Output


class HarnessProcess:
    def __init__(
        self, argv: Sequence[str], *, env: dict[str, str], cwd: str, keep_bytes: int, flood_bytes: int
    ) -> None:
        self.argv = list(argv)
        self.env = env
        self.cwd = cwd
        self.flood_bytes = flood_bytes
        self.stdout = Output(keep_bytes)
        self.stderr = Output(keep_bytes)
        self.flooded = asyncio.Event()
        self.proc: asyncio.subprocess.Process | None = None
        self._readers: list[asyncio.Task] = []
        self._exit: asyncio.Task | None = None
        self._started = 0.0
        self._finished = False

    async def start(self) -> None:
        """Raises FileNotFoundError / PermissionError when the program cannot be run."""
        self._started = time.monotonic()
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,  # its own session and process group: killed as one
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._readers = [
            asyncio.ensure_future(self._drain(self.proc.stdout, self.stdout)),
            asyncio.ensure_future(self._drain(self.proc.stderr, self.stderr)),
        ]
        self._exit = asyncio.ensure_future(self.proc.wait())

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def exited(self) -> bool:
        return self._exit is not None and self._exit.done()

    async def _drain(self, stream: asyncio.StreamReader, out: Output) -> None:
        while True:
            chunk = await stream.read(_CHUNK)
            if not chunk:
                return
            out.add(chunk)
            if self.stdout.total + self.stderr.total > self.flood_bytes:
                self.flooded.set()

    async def wait(self, timeout_s: float, *events: asyncio.Event) -> None:
        """Until the process exits, floods its output, one of `events` is set, or `timeout_s`."""
        assert self._exit is not None
        waiters = [asyncio.ensure_future(e.wait()) for e in (self.flooded, *events)]
        try:
            # asyncio.wait never cancels what it waits on: the exit task stays for the next wait
            await asyncio.wait([self._exit, *waiters], timeout=max(0.0, timeout_s), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()

    def kill_group(self) -> None:
        if self.proc is None or self._finished:
            return
        # The group outlives its leader while any member lives, and its id is not reused meanwhile;
        # once all are gone the id is free again, but pids are handed out in sequence, so it comes
        # back only after the whole pid space has been used (finish() kills once, at once).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    async def finish(self, grace_s: float = 2.0) -> ProcessResult:
        """SIGKILL the whole group (whatever is left of it), reap the leader, collect the output."""
        assert self.proc is not None and self._exit is not None
        self.kill_group()
        self._finished = True
        with contextlib.suppress(TimeoutError):  # only a kernel problem outlives SIGKILL that long
            await asyncio.wait_for(asyncio.shield(self._exit), timeout=10.0)
        _, pending = await asyncio.wait(self._readers, timeout=grace_s)
        for task in pending:  # a process outside the group (setsid) still holds a pipe
            task.cancel()
        rc = self.proc.returncode
        sig = None
        if rc is not None and rc < 0:
            try:
                sig = signal.Signals(-rc).name
            except ValueError:
                sig = str(-rc)
        return ProcessResult(
            pid=self.proc.pid,
            exit_code=rc if rc is None or rc >= 0 else None,
            signal=sig,
            duration_s=time.monotonic() - self._started,
            stdout=self.stdout,
            stderr=self.stderr,
        )

    def abandon(self) -> None:
        """On the way out of a failed or cancelled episode: kill the group, stop reading (no await).
        Nothing to do after finish()."""
        self.kill_group()
        self._finished = True
        for task in (*self._readers, *([self._exit] if self._exit is not None else [])):
            if not task.done():
                task.cancel()
