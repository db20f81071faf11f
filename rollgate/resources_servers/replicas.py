"""An environment client over its replicas: round robin, skipping a replica that refuses connections.

Every replica of an environment shares the session store, so any replica can serve any call of
any session: calls are spread per call, not pinned per episode, and a dead replica costs one
refused connection instead of failing the episodes pinned to it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from rollgate.core.errors import UpstreamError
from rollgate.core.http import RetryPolicy
from rollgate.core.replicas import ReplicaSet
from rollgate.core.schemas import RoleView, SeedResponse, ToolOutput, VerifyRequest, VerifyResult
from rollgate.resources_servers.client import HttpEnvClient

log = logging.getLogger("rollgate.replicas")
T = TypeVar("T")


class ReplicatedEnvClient:
    """An EnvClient over every replica of one environment."""

    def __init__(
        self,
        name: str,
        urls: list[str],
        *,
        timeout_s: float = 30.0,
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
        channel: bool = False,
    ):
        self.name = name
        self.replicas = ReplicaSet(urls, what=f"env {name}")
        headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        self._clients = {
            u: HttpEnvClient(name, u, timeout_s=timeout_s, headers=headers, retry=retry, channel=channel)
            for u in self.replicas.urls
        }

    async def _each(self, call: Callable[[HttpEnvClient], Awaitable[T]]) -> T:
        last: UpstreamError | None = None
        for url in self.replicas.order():
            try:
                return await call(self._clients[url])
            except UpstreamError as exc:
                if not getattr(exc, "not_sent", False):
                    raise  # the replica got the request: re-sending could run a tool twice
                log.warning("env %s replica %s unreachable, trying the next: %s", self.name, url, exc)
                last = exc
        assert last is not None
        raise last

    async def tools(self) -> list[dict[str, Any]]:
        return await self._each(lambda c: c.tools())

    async def seed(self, task, *, timeout_s=None) -> SeedResponse:
        return await self._each(lambda c: c.seed(task, timeout_s=timeout_s))

    async def call_tool(self, session_id, name, arguments, *, timeout_s=None, role=None) -> ToolOutput:
        return await self._each(lambda c: c.call_tool(session_id, name, arguments, timeout_s=timeout_s, role=role))

    async def roles(self) -> dict[str, Any]:
        return await self._each(lambda c: c.roles())

    async def observe(self, session_id, role, *, timeout_s=None, peek=False) -> RoleView:
        return await self._each(lambda c: c.observe(session_id, role, timeout_s=timeout_s, peek=peek))

    async def verify(self, session_id, request: VerifyRequest, *, timeout_s=None) -> VerifyResult:
        return await self._each(lambda c: c.verify(session_id, request, timeout_s=timeout_s))

    async def close(self, session_id, *, timeout_s=None) -> None:
        await self._each(lambda c: c.close(session_id, timeout_s=timeout_s))

    async def aclose(self) -> None:
        for c in self._clients.values():
            await c.aclose()
