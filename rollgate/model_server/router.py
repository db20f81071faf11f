"""Replica routing for upstream model servers: rendezvous (highest-random-weight) hashing of a
session key, so an episode's calls land on the same replica (its prefix cache holds the episode's
history) and only 1/N of sessions move when a replica joins or leaves. Dead replicas are skipped
until a health check or a later request finds them alive again."""

from __future__ import annotations

import asyncio
import logging

from rollgate.core.http import NO_RETRY, HttpClient
from rollgate.core.replicas import ReplicaSet

log = logging.getLogger("rollgate.model_server.router")


class ReplicaRouter:
    """Model replicas by session key (rollgate.core.replicas), with HTTP clients and health checks."""

    def __init__(
        self,
        urls: list[str],
        *,
        component: str = "model",
        timeout_s: float = 120.0,
        health_path: str = "/health",
        health_interval_s: float = 5.0,
        headers: dict[str, str] | None = None,
    ):
        if not urls:
            raise ValueError("at least one upstream URL is needed (settings.model.upstream_urls)")
        self.replicas = ReplicaSet(urls, what="model", down_for_s=max(health_interval_s, 1.0))
        self.urls = self.replicas.urls
        self.clients = {
            u: HttpClient(u, component=component, timeout_s=timeout_s, retry=NO_RETRY, headers=headers)
            for u in self.urls
        }
        self.health_path = health_path
        self.health_interval_s = health_interval_s
        self._health_task: asyncio.Task | None = None

    def order(self, key: str) -> list[str]:
        """Replicas to try for `key`: live ones by hash weight, then the ones marked down."""
        return self.replicas.order(key)

    def mark_down(self, url: str) -> None:
        self.replicas.mark_down(url)

    def mark_up(self, url: str) -> None:
        self.replicas.mark_up(url)

    def live(self) -> list[str]:
        return self.replicas.live()

    def start_health_checks(self) -> None:
        if self._health_task is None or self._health_task.done():
            self._health_task = asyncio.get_running_loop().create_task(self._health_loop())

    async def check_once(self) -> None:
        async def probe(url: str) -> None:
            try:
                await self.clients[url].request("GET", self.health_path, timeout_s=min(5.0, self.health_interval_s))
                self.mark_up(url)
            except Exception:
                self.replicas.mark_down(url, for_s=self.health_interval_s * 2)

        await asyncio.gather(*(probe(u) for u in self.urls))

    async def _health_loop(self) -> None:
        while True:
            await self.check_once()
            await asyncio.sleep(self.health_interval_s)

    async def aclose(self) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
        for client in self.clients.values():
            await client.close()
