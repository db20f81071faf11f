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

log = logging.getLogger("rollgate.replicas")


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
