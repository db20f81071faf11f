"""How the agent (and the gateway proxy) reach a model server: one interface, two shapes.

`create(request)` takes an OpenAI Responses API request body (a dict) and returns the response
body (a dict). In training mode the model-produced output items carry `prompt_token_ids`,
`generation_token_ids`, `generation_log_probs`."""

from __future__ import annotations

import time
from typing import Any, Protocol

from rollgate.core.http import NO_RETRY, HttpClient, RetryPolicy
from rollgate.core.replicas import ReplicaSet, failover

# The request metadata key that names an episode's session (the agent sets it): replica affinity.
SESSION_METADATA_KEY = "rollgate_session"


class ResponsesService(Protocol):
    """What a model server does, independent of HTTP (implemented in model_server.service)."""

    async def create(self, request: dict[str, Any]) -> dict[str, Any]: ...


class ModelClient(Protocol):
    async def create(self, request: dict[str, Any], *, timeout_s: float | None = None) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...


class LocalModelClient:
    """The embedded shape: direct calls into the in-process service."""

    def __init__(self, service: ResponsesService):
        self.service = service

    async def create(self, request: dict[str, Any], *, timeout_s: float | None = None) -> dict[str, Any]:
        import asyncio

        if timeout_s is None:
            return await self.service.create(request)
        async with asyncio.timeout(timeout_s):
            return await self.service.create(request)

    async def aclose(self) -> None:
        return None


class HttpModelClient:
    """The distributed shape: POST {url}/v1/responses, on one server or over its replicas.

    `timeout_s` is one deadline per call, retries included; a caller's `timeout_s` (e.g. what is
    left of the episode) replaces it. Over several replicas, an episode's calls go to the same
    replica (rendezvous hashing of its `metadata.rollgate_session`: that replica's prefix cache
    holds the history), and a call that times out there fails over to the next replica instead of
    being re-sent to the stalled one (rollgate.core.replicas.failover)."""

    def __init__(
        self,
        base_url: str | list[str],
        *,
        timeout_s: float = 120.0,
        attempt_timeout_s: float | None = None,
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
        channel: bool = False,
    ):
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        self.timeout_s = timeout_s
        self.attempt_timeout_s = attempt_timeout_s
        self.retry = retry or RetryPolicy()
        self.replicas = ReplicaSet(urls, what="model")
        # One replica: its client retries by itself. Several: failover() retries across them.
        per_url = self.retry if len(urls) == 1 else NO_RETRY
        self.clients = {
            u: HttpClient(u, component="model", timeout_s=timeout_s, headers=headers, retry=per_url, channel=channel)
            for u in self.replicas.urls
        }
        self.http = self.clients[self.replicas.urls[0]]

    async def create(self, request: dict[str, Any], *, timeout_s: float | None = None) -> dict[str, Any]:
        # Generation is idempotent for our purposes (nothing is mutated), so timeouts may retry.
        if len(self.clients) == 1:
            return await self.http.request("POST", "/v1/responses", request, timeout_s=timeout_s, idempotent=True)
        meta = request.get("metadata")
        key = meta.get(SESSION_METADATA_KEY) if isinstance(meta, dict) else None
        return await failover(
            self.replicas,
            lambda url, left: self.clients[url].request(
                "POST", "/v1/responses", request, timeout_s=left, idempotent=True
            ),
            component="model",
            deadline=time.monotonic() + (timeout_s or self.timeout_s),
            retry=self.retry,
            key=key,
            attempt_timeout_s=self.attempt_timeout_s,
        )

    async def aclose(self) -> None:
        for client in self.clients.values():
            await client.close()
