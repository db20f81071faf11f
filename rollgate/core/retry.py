"""The one retry schedule every caller uses: how many attempts, how long to wait between them,
and never past the caller's deadline.

A caller runs its own loop (`for failed in count(1): try ... except: if not await
policy.wait(failed, deadline=...): raise`), so each keeps its own idea of what is retryable,
while the schedule is the same everywhere and written once:

- exponential backoff with jitter, capped (`backoff_s * 2**n`, at most `max_backoff_s`);
- no sleep after the last attempt: `wait()` returns False at once when no attempt follows;
- a deadline is absolute (`time.monotonic()`): a wait that would end at or past it is not taken,
  so retries never stretch a call beyond its budget;
- an optional cancel event cuts a wait short.

A hand-written object rather than tenacity or stamina: the HTTP client calls this on every
request, the loops need the deadline and the cancel event, and failover across replicas
(core/replicas.py) picks a different target per attempt; each library would wrap, not replace,
these few lines."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable


class RetryPolicy:
    """`attempts`: tries in all (None: unbounded, for loops that must outlive an outage).
    `jitter`: the random share of each wait, 1.0 (full jitter, uniform in [0, cap]) spreads many
    clients so they do not stampede a recovering server; 0.2 keeps waits within 20% of the cap."""

    __slots__ = ("attempts", "backoff_s", "max_backoff_s", "jitter", "on_retry")

    def __init__(
        self,
        attempts: int | None = 3,
        backoff_s: float = 0.05,
        max_backoff_s: float = 2.0,
        *,
        jitter: float = 1.0,
        on_retry: Callable[[], None] | None = None,
    ):
        if attempts is not None and attempts < 1:
            raise ValueError("attempts must be >= 1 (or None for unbounded)")
        if backoff_s < 0 or max_backoff_s < 0:
            raise ValueError("backoff_s and max_backoff_s must be >= 0")
        if not 0.0 <= jitter <= 1.0:
            raise ValueError("jitter must be within [0, 1]")
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.jitter = jitter
        self.on_retry = on_retry  # e.g. a Prometheus counter's inc: retries are worth seeing

    def __repr__(self) -> str:
        return (
            f"RetryPolicy(attempts={self.attempts}, backoff_s={self.backoff_s:g}, "
            f"max_backoff_s={self.max_backoff_s:g}, jitter={self.jitter:g})"
        )

    def delay(self, failed: int) -> float:
        """The wait after the `failed`-th failed attempt (1 for the first)."""
        cap = min(self.max_backoff_s, self.backoff_s * 2 ** min(failed - 1, 62))
        return cap * (1.0 - self.jitter * random.random())

    def exhausted(self, failed: int) -> bool:
        """True when `failed` failed attempts leave none to make."""
        return self.attempts is not None and failed >= self.attempts

    def next_delay(self, failed: int, deadline: float | None = None) -> float | None:
        """The wait before the next attempt, or None when none should follow (attempts spent, or
        the wait would reach the deadline). Counts a retry in `on_retry` when there is one."""
        if self.exhausted(failed):
            return None
        delay = self.delay(failed)
        if deadline is not None and time.monotonic() + delay >= deadline:
            return None
        if self.on_retry is not None:
            self.on_retry()
        return delay

    async def wait(self, failed: int, *, deadline: float | None = None, cancel: asyncio.Event | None = None) -> bool:
        """Sleep before the next attempt; False (without sleeping) when none follows, or when
        `cancel` is set before the wait ends."""
        delay = self.next_delay(failed, deadline)
        if delay is None:
            return False
        if cancel is None:
            await asyncio.sleep(delay)
            return True
        if cancel.is_set():
            return False
        try:
            await asyncio.wait_for(cancel.wait(), timeout=delay)
        except TimeoutError:
            return True
        return False

    def wait_sync(self, failed: int, *, deadline: float | None = None) -> bool:
        """`wait` for blocking callers (the rollout client)."""
        delay = self.next_delay(failed, deadline)
        if delay is None:
            return False
        time.sleep(delay)
        return True


NO_RETRY = RetryPolicy(attempts=1)
