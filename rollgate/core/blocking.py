"""Waiting that cannot hang without a word: a coroutine run from sync code, and an exclusive file
lock that says whom it waits for and gives up after a deadline.

`run_sync` runs a coroutine to completion from sync code, also where the calling thread is already
inside a running event loop (start-up code called from async code). There it runs the coroutine on
a loop of its own in a daemon thread; if the waiting thread is interrupted (Ctrl-C, a test's
timeout raised by a signal handler), the coroutine is cancelled and the interruption goes on at
once, instead of waiting for a thread that may never end.

`FileLock` serialises work on shared files across processes and threads (a cache built once per
machine). The holder's pid is written into the lock file, so a waiter logs whom it waits for, and
after `timeout_s` raises a `CapacityError` that names the file and the holder. Its async form
polls with `asyncio.sleep`, so a waiting coroutine does not block its loop and can be cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

from rollgate.core.errors import CapacityError

log = logging.getLogger("rollgate.blocking")
T = TypeVar("T")

CANCEL_GRACE_S = 5.0  # how long an interrupted run_sync waits for its coroutine to unwind


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion from sync code, inside a running event loop or not."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    return _Worker(coro).result()


class _Worker:
    """One coroutine on a fresh loop in a daemon thread (a daemon, so that a coroutine stuck in
    blocking code can never hold the interpreter's exit)."""

    def __init__(self, coro: Coroutine[Any, Any, Any]):
        self._coro = coro
        self._done = threading.Event()
        self._started = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        threading.Thread(target=self._main, name="rollgate-run-sync", daemon=True).start()

    def _main(self) -> None:
        try:
            with asyncio.Runner() as runner:
                self._loop = runner.get_loop()
                self._value = runner.run(self._body())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            self._error = exc
        finally:
            self._started.set()
            self._done.set()

    async def _body(self) -> Any:
        self._task = asyncio.current_task()
        self._started.set()
        return await self._coro

    def result(self) -> Any:
        try:
            self._done.wait()
        except BaseException:
            self._cancel()
            raise
        if self._error is not None:
            raise self._error
        return self._value

    def _cancel(self) -> None:
        self._started.wait(CANCEL_GRACE_S)
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing to cancel
                loop.call_soon_threadsafe(task.cancel)
        if not self._done.wait(CANCEL_GRACE_S):
            log.warning("an interrupted coroutine did not stop within %.0fs; its thread is left behind", CANCEL_GRACE_S)


class FileLock:
    """An exclusive flock on `path`, for `with` or `async with`. `what` names the work it guards in
    messages; `timeout_s` bounds the wait (None: wait as long as it takes, logging as it waits)."""

    LOG_EVERY_S = 30.0

    def __init__(self, path: str | os.PathLike, *, what: str, timeout_s: float | None, component: str = "rollgate"):
        self.path = Path(path)
        self.what = what
        self.timeout_s = timeout_s
        self.component = component
        self._fd: int | None = None

    def _try(self) -> bool:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)
        return True

    def holder(self) -> str:
        """Who holds the lock, as a waiter can tell from the pid the holder wrote."""
        try:
            pid = int(self.path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return "an unknown holder"
        return f"this process (pid {pid})" if pid == os.getpid() else f"pid {pid}"

    def _waited(self, started: float, last_log: float) -> float:
        """Raise once the deadline has passed; log who holds the lock every LOG_EVERY_S."""
        now = time.monotonic()
        if self.timeout_s is not None and now - started >= self.timeout_s:
            raise CapacityError(
                f"waited {now - started:.0f}s for {self.what} (lock file {self.path}, held by {self.holder()}); "
                "another run is doing the same work: retry when it has finished",
                component=self.component,
                retry_after_s=30.0,
            )
        if now - last_log >= self.LOG_EVERY_S:
            held = self.holder()
            log.info("waiting %.0fs for %s (lock file %s, held by %s)", now - started, self.what, self.path, held)
            return now
        return last_log

    def _waits(self) -> Iterator[float]:
        """The pauses between tries, until the lock is taken (or the deadline raises)."""
        started = last_log = time.monotonic()
        delay = 0.02
        while not self._try():
            last_log = self._waited(started, last_log)
            yield delay
            delay = min(delay * 2, 0.5)

    def __enter__(self) -> FileLock:
        try:
            for delay in self._waits():
                time.sleep(delay)
        except BaseException:  # interrupted, or the deadline passed
            self._close()
            raise
        return self

    async def __aenter__(self) -> FileLock:
        try:
            for delay in self._waits():
                await asyncio.sleep(delay)
        except BaseException:  # cancelled, or the deadline passed
            self._close()
            raise
        return self

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __exit__(self, *exc: object) -> None:
        self._close()

    async def __aexit__(self, *exc: object) -> None:
        self._close()
