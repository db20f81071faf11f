"""One harness process: started under its reaper (reaper.py, a child subreaper that takes every
descendant down with the harness, also those that left the session), its output drained into
bounded buffers.

The episode supervises it (rollgate.agent_server.harness.agent): it waits for the process, an
output flood, or its own events, and checks budgets in between. `finish()` stops whatever still
runs: SIGTERM to the reaper, which passes it on to every descendant and SIGKILLs them after a short
grace; SIGKILL to the harness's process group if the reaper is slow to end. When the reaper has
exited, nothing the harness started is alive."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

log = logging.getLogger("rollgate.agent.harness")

_CHUNK = 64 * 1024
_REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reaper.py")
# A cancel stops a harness within a second: its descendants get SIGTERM and TERM_GRACE_S to end,
# then SIGKILL from the reaper. Should the reaper be slow (a starved machine), the harness's own
# process group is SIGKILLed at KILL_AFTER_S while the reaper goes on collecting the processes that
# left it; the reaper itself is SIGKILLed only if it is stuck for REAPER_STUCK_S more (then a
# process that left the group could escape: logged as an error).
TERM_GRACE_S = 0.3
KILL_AFTER_S = 0.8
REAPER_STUCK_S = 10.0


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


async def _read_all(fd: int) -> bytes:
    """Read a pipe to its end without blocking the event loop."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    try:
        return await reader.read()
    finally:
        transport.close()


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
        self.harness_pid = 0  # the harness itself (the reaper's child), leader of its process group

    async def start(self) -> None:
        """Raises FileNotFoundError / PermissionError when the program cannot be run (an OSError
        in all cases where the harness did not start)."""
        self._started = time.monotonic()
        status_r, status_w = os.pipe()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-S",
                _REAPER,
                str(status_w),
                str(TERM_GRACE_S),
                str(os.getpid()),
                "--",
                *self.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,  # Ctrl-C in Rollgate's terminal is not the harness's to get
                pass_fds=(status_w,),
            )
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(status_w)
        status = await _read_all(status_r)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._exit = asyncio.ensure_future(self.proc.wait())
        ok, _, pid = status.partition(b" ")
        if ok != b"0" or not pid.isdigit():  # the exec failed (the reaper has exited), or no reaper
            await self._exit
            code = int(status) if status.isdigit() else 0
            if code:
                raise OSError(code, os.strerror(code))  # FileNotFoundError for ENOENT, ...
            why = (await self.proc.stderr.read()).decode(errors="replace").strip().splitlines()[-1:]
            raise ChildProcessError(f"its reaper did not start (exit status {self.proc.returncode}): {why}")
        self.harness_pid = int(pid)
        self._readers = [
            asyncio.ensure_future(self._drain(self.proc.stdout, self.stdout)),
            asyncio.ensure_future(self._drain(self.proc.stderr, self.stderr)),
        ]

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

    def _terminate(self) -> None:
        """SIGTERM to the reaper: it stops the harness and all it started, then exits."""
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)

    def _kill_harness(self) -> None:
        """The reaper is slow: SIGKILL the harness's own process group now (the reaper, outside
        it, still collects what left it). Its id is not reused while the reaper has not reaped
        the harness, nor while any member lives."""
        if self.proc is not None and self.proc.returncode is None and self.harness_pid:
            log.warning("harness %d runs %.1fs after a stop: SIGKILL to its group", self.harness_pid, KILL_AFTER_S)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.harness_pid, signal.SIGKILL)

    def _kill_reaper(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            log.error("harness reaper %d is stuck: SIGKILL; what left the harness's group may live on", self.pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)

    async def finish(self, grace_s: float = 2.0) -> ProcessResult:
        """Stop whatever still runs (within KILL_AFTER_S), reap the reaper, collect the output."""
        assert self.proc is not None and self._exit is not None
        if not self._finished:
            self._finished = True
            self._terminate()
            for escalate, after_s in ((self._kill_harness, KILL_AFTER_S), (self._kill_reaper, REAPER_STUCK_S)):
                try:
                    await asyncio.wait_for(asyncio.shield(self._exit), timeout=after_s)
                    break
                except TimeoutError:
                    escalate()
            with contextlib.suppress(TimeoutError):  # only a kernel problem outlives SIGKILL that long
                await asyncio.wait_for(asyncio.shield(self._exit), timeout=10.0)
        _, pending = await asyncio.wait(self._readers, timeout=grace_s)
        for task in pending:  # only a process that escaped the reaper still holds a pipe
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
        """On the way out of a failed or cancelled episode (no await): SIGTERM to the reaper, which
        stops the rest by itself, and the same escalation as finish() later if it has not; stop
        reading. Nothing to do after finish()."""
        if not self._finished:
            self._finished = True
            self._terminate()
            if self.proc is not None and self.proc.returncode is None:
                loop = asyncio.get_running_loop()
                loop.call_later(KILL_AFTER_S, self._kill_harness)
                loop.call_later(KILL_AFTER_S + REAPER_STUCK_S, self._kill_reaper)
        for task in (*self._readers, *([self._exit] if self._exit is not None else [])):
            if not task.done():
                task.cancel()
