"""Worker processes that grade math answers, each comparison under a time limit measured inside
the worker.

A thread pool with a caller-side timeout (what this replaces) counted the time an answer waited
behind abandoned sympy work, so a correct answer could score 0 as a "timeout"; abandoned threads
also kept running. Here the limit starts when a worker starts the comparison (SIGALRM in the
worker's main thread, which interrupts pure-Python sympy work), so waiting costs nothing but time.
An answer that runs out of its time is graded not equal (only a pathological answer gets there).
A worker that does not come back at all (a crash, or C code that ignores the alarm) is an
infrastructure failure, `GraderUnavailable`, never a grade: the pool is rebuilt for the next call.
"""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import signal
import threading
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from rollgate.core.errors import UpstreamError
from rollgate.verifiers.math_equiv import Equivalence, _compare

log = logging.getLogger("rollgate.verifiers")

# How long past its own limit a comparison may take to come back before its worker is given up,
# and how long a new pool's workers may take to start (imports of sympy and math-verify).
HARD_GRACE_S = 30.0
START_GRACE_S = 60.0


class GraderUnavailable(UpstreamError):
    """The grading workers did not answer: an infrastructure failure (retryable), not a wrong answer."""

    def __init__(self, message: str):
        super().__init__(message, component="math-grader", transient=True)


class _OutOfTime(Exception):
    pass


def _alarm(_signum: int, _frame: Any) -> None:
    raise _OutOfTime


def _warm() -> None:
    # Imports happen once per worker, before any comparison's clock starts.
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its "timeout is disabled" notice
    import math_verify  # noqa: F401
    import sympy  # noqa: F401


def _graded(given: str, expected: str, rel_tol: float, abs_tol: float, timeout_s: float) -> Equivalence:
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        return _compare(given, expected, rel_tol, abs_tol)
    except _OutOfTime:
        return Equivalence(False, "timeout")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


class MathGrader:
    """`workers` grading processes, started on first use (forkserver: the caller may be a
    multi-threaded server, which must not be forked). Thread-safe; close it when done."""

    def __init__(self, *, workers: int = 2, timeout_s: float = 5.0):
        if workers < 1 or timeout_s <= 0:
            raise ValueError("a MathGrader needs workers >= 1 and timeout_s > 0")
        self.workers, self.timeout_s = workers, timeout_s
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._in_flight = 0
        self._answered = False  # has the current pool answered once (its workers have started)?

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    self.workers, mp_context=multiprocessing.get_context("forkserver"), initializer=_warm
                )
            return self._pool

    def _discard(self, pool: concurrent.futures.ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool, self._answered = None, False
        # A stuck worker ignores shutdown: kill it. Python 3.14's executor can (kill_workers); before
        # it there is no public way, so the executor's own table of worker processes is used.
        kill_workers = getattr(pool, "kill_workers", None)
        if kill_workers is not None:
            kill_workers()
        else:
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                proc.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    def compare(
        self, given: str, expected: str, *, rel_tol: float = 1e-6, abs_tol: float = 1e-9, timeout_s: float | None = None
    ) -> Equivalence:
        limit = self.timeout_s if timeout_s is None else timeout_s
        pool = self._executor()
        args = (given, expected, rel_tol, abs_tol, limit)
        with self._lock:
            self._in_flight += 1
            # Every comparison ahead of this one ends within its own limit, so the wait below is
            # only reached when a worker stopped answering.
            rounds = -(-self._in_flight // self.workers)
        try:
            try:
                future = pool.submit(_graded, *args)
            except BrokenProcessPool:
                self._discard(pool)
                pool = self._executor()
                future = pool.submit(_graded, *args)
            start = 0.0 if self._answered else START_GRACE_S
            result = future.result(timeout=start + (max(limit, self.timeout_s) + HARD_GRACE_S) * rounds)
            self._answered = True
            return result
        except (concurrent.futures.TimeoutError, BrokenProcessPool) as exc:
            self._discard(pool)
            raise GraderUnavailable(f"the math grading workers did not answer ({type(exc).__name__})") from None
        finally:
            with self._lock:
                self._in_flight -= 1

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> MathGrader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
