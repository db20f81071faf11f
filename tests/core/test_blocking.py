"""run_sync and FileLock (rollgate/core/blocking.py): a wait either ends or says why. Real threads,
real signals, a real second process holding a real flock."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from rollgate.core.blocking import FileLock, run_sync
from rollgate.core.errors import CapacityError

HOLD = (
    "import fcntl, os, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "os.write(fd, f'{os.getpid()}\\n'.encode())\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
)


class Interrupted(BaseException):
    """What a signal handler raises in the main thread (pytest-timeout's failure is a BaseException)."""


@pytest.fixture
def holder(tmp_path):
    """Another process holding the lock until its stdin closes."""
    path = tmp_path / "pool.lock"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"held\n"
    yield path, proc
    proc.stdin.close()
    proc.wait(10)


def test_a_lock_held_elsewhere_fails_after_its_deadline_naming_the_file_and_the_holder(holder):
    path, proc = holder
    started = time.monotonic()
    with pytest.raises(CapacityError) as err, FileLock(path, what="the task pool of demo==1.0", timeout_s=0.3):
        pass
    assert 0.3 <= time.monotonic() - started < 5
    msg = str(err.value)
    assert "the task pool of demo==1.0" in msg and str(path) in msg and f"held by pid {proc.pid}" in msg
    assert err.value.status == 503 and err.value.retry_after_s > 0
    proc.stdin.close()  # the holder exits: its lock goes with it
    proc.wait(10)
    with FileLock(path, what="x", timeout_s=5) as lock:
        assert lock.holder() == f"this process (pid {os.getpid()})"


def test_a_second_holder_in_the_same_process_waits_and_gets_the_lock_when_it_is_released(tmp_path):
    path = tmp_path / "build.lock"
    order = []
    with FileLock(path, what="the build", timeout_s=1):

        def second():
            with FileLock(path, what="the build", timeout_s=10):
                order.append("second")

        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.3)
        order.append("first done")
    t.join(10)
    assert order == ["first done", "second"]
    outer, inner = FileLock(path, what="b", timeout_s=1), FileLock(path, what="b", timeout_s=0.2)
    with pytest.raises(CapacityError, match="held by this process"), outer, inner:
        pass


def test_an_async_wait_for_a_lock_is_cancellable_and_leaves_nothing_held(holder):
    path, proc = holder

    async def wait_then_cancel():
        task = asyncio.create_task(FileLock(path, what="p", timeout_s=60).__aenter__())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(wait_then_cancel(), 10))
    proc.stdin.close()
    proc.wait(10)
    with FileLock(path, what="p", timeout_s=2):
        pass


def test_run_sync_inside_a_running_loop_returns_the_value_and_raises_the_error():
    async def answer(x):
        await asyncio.sleep(0.01)
        return x * 2

    async def fail():
        raise ValueError("bad field")

    async def caller():
        assert run_sync(answer(21)) == 42
        with pytest.raises(ValueError, match="bad field"):
            run_sync(fail())

    asyncio.run(caller())
    assert run_sync(answer(4)) == 8  # no running loop: plain asyncio.run


def test_run_sync_interrupted_while_waiting_cancels_its_coroutine_and_goes_on_at_once(holder):
    """The silent hang this guards against: a test timeout raised in the main thread while it
    waited on a coroutine running elsewhere used to wait for that coroutine (here, one blocked on a
    lock another process holds) for ever."""
    path, _ = holder
    unwound = threading.Event()

    async def stuck():
        try:
            async with FileLock(path, what="p", timeout_s=3600):
                pass
        finally:
            unwound.set()

    def interrupt(signum, frame):
        raise Interrupted

    async def caller():
        run_sync(stuck())

    old = signal.signal(signal.SIGUSR1, interrupt)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        timer.start()
        started = time.monotonic()
        with pytest.raises(Interrupted):
            asyncio.run(caller())
        assert time.monotonic() - started < 10
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, old)
    assert unwound.wait(5), "the coroutine was not cancelled"
