"""Choosing among the replicas of one upstream: the one picker that the gateway's proxy, the
agent's environment clients and the model router share.

- `order()` (no key): round robin, for upstreams whose replicas share all state (environment
  replicas share the session store, so calls spread per call, not per episode);
- `order(key)`: rendezvous (highest-random-weight) hashing of a session key, so an episode's
  calls land on the same replica (its prefix cache holds the history) and only 1/N of the keys
  move when a replica joins or leaves.
Either way, replicas marked down come last until `mark_up` or their back-off ends."""

from __future__ import annotations

import hashlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from rollgate.core.errors import UpstreamError, UpstreamTimeout
from rollgate.core.retry import RetryPolicy

log = logging.getLogger("rollgate.replicas")
T = TypeVar("T")


def _weight(key: str, url: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}|{url}".encode(), digest_size=8).digest(), "big")


class ReplicaSet:
    def __init__(self, urls: list[str], *, what: str = "upstream", down_for_s: float = 1.0):
        if not urls:
            raise ValueError(f"a replica set needs at least one URL ({what})")
        self.urls = [u.rstrip("/") for u in urls]
        self.what = what
        self.down_for_s = down_for_s
        self.down_until: dict[str, float] = {}
        self._next = itertools.cycle(range(len(self.urls)))

    def order(self, key: str | None = None) -> list[str]:
        """Every replica once: live ones first (by hash weight for a key, else round robin)."""
        if key is None:
            start = next(self._next)
            ranked = self.urls[start:] + self.urls[:start]
        else:
            ranked = sorted(self.urls, key=lambda u: _weight(key, u), reverse=True)
        if not self.down_until:
            return ranked
        now = time.monotonic()
        live = [u for u in ranked if self.down_until.get(u, 0.0) <= now]
        return live + [u for u in ranked if u not in live]

    def live(self) -> list[str]:
        now = time.monotonic()
        return [u for u in self.urls if self.down_until.get(u, 0.0) <= now]

    def mark_down(self, url: str, for_s: float | None = None) -> None:
        if url not in self.down_until:
            log.warning("%s replica %s is down; routing around it", self.what, url)
        self.down_until[url] = time.monotonic() + (self.down_for_s if for_s is None else for_s)

    def mark_up(self, url: str) -> None:
        self.down_until.pop(url, None)


async def failover(
    replicas: ReplicaSet,
    call: Callable[[str, float], Awaitable[T]],
    *,
    component: str,
    deadline: float,
    retry: RetryPolicy,
    key: str | None = None,
    attempt_timeout_s: float | None = None,
    idempotent: bool = True,
) -> T:
    """Run `call(url, timeout_s)` on the replicas (by `key`, see ReplicaSet.order) until one
    answers, all within one deadline (absolute, time.monotonic()).

    A replica that timed out is marked down and not sent the request again in this call: the
    next attempt goes to another replica, and with none left the timeout is raised. While another
    replica is left, one attempt gets at most `attempt_timeout_s` (default: half the time left),
    so a stalled replica leaves time to fail over. A replica that refused the connection is
    marked down too (it comes last in the order). Attempts and the waits between them follow
    `retry`; an error that is not transient (the request is at fault) is raised at once, and so is
    a failure of a request the replica may have run, unless the call is `idempotent`."""
    stalled: set[str] = set()
    failed = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise UpstreamTimeout(
                f"no {replicas.what} replica answered before the call's deadline", component=component
            )
        order = [u for u in replicas.order(key) if u not in stalled]
        url = order[0]
        budget = left
        if len(order) > 1:
            budget = min(left, attempt_timeout_s) if attempt_timeout_s else left / 2
        try:
            result = await call(url, budget)
        except UpstreamError as exc:
            failed += 1
            unsent = getattr(exc, "not_sent", False)
            if not exc.transient or not (idempotent or unsent):
                raise
            if isinstance(exc, UpstreamTimeout):
                stalled.add(url)
            if isinstance(exc, UpstreamTimeout) or unsent:
                replicas.mark_down(url)
            if stalled.issuperset(replicas.urls) or not await retry.wait(failed, deadline=deadline):
                raise
            log.warning("%s replica %s failed (%s); trying again (attempt %d)", replicas.what, url, exc, failed + 1)
            continue
        if url in replicas.down_until:
            replicas.mark_up(url)
        return result
