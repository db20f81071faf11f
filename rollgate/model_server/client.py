"""How the agent (and the gateway proxy) reach a model server: one interface, two shapes.

`create(request)` takes an OpenAI Responses API request body (a dict) and returns the response
body (a dict). In training mode the model-produced output items carry `prompt_token_ids`,
`generation_token_ids`, `generation_log_probs`."""

from __future__ import annotations

from typing import Any, Protocol

from rollgate.core.http import HttpClient, RetryPolicy


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
    """The distributed shape: POST {base_url}/v1/responses."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 120.0,
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
        channel: bool = False,
    ):
        headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        self.http = HttpClient(
            base_url, component="model", timeout_s=timeout_s, headers=headers, retry=retry, channel=channel
        )

    async def create(self, request: dict[str, Any], *, timeout_s: float | None = None) -> dict[str, Any]:
        # Generation is idempotent for our purposes (nothing is mutated), so timeouts may retry.
        return await self.http.request("POST", "/v1/responses", request, timeout_s=timeout_s, idempotent=True)

    async def aclose(self) -> None:
        await self.http.close()
