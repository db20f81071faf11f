"""The openai backend: forward Responses requests unchanged to any Responses-compatible endpoint
(no token data: a hosted API does not expose it)."""

from __future__ import annotations

from typing import Any

from rollgate.core.http import HttpClient, RetryPolicy


class OpenAIPassthrough:
    name = "openai"

    def __init__(
        self, base_url: str, *, api_key: str | None = None, model: str | None = None, timeout_s: float = 120.0
    ):
        headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        # A base URL with or without the /v1 suffix both work.
        base = base_url.rstrip("/")
        self.prefix = "" if base.endswith("/v1") else "/v1"
        self.http = HttpClient(
            base, component="model", timeout_s=timeout_s, headers=headers, retry=RetryPolicy(attempts=2)
        )
        self.model = model

    def ready(self) -> bool:
        return True

    async def forward(self, body: dict[str, Any]) -> dict[str, Any]:
        served = body.get("model")
        upstream = dict(body, stream=False)
        if self.model:
            upstream["model"] = self.model
        out = await self.http.request("POST", f"{self.prefix}/responses", upstream, idempotent=True)
        if isinstance(out, dict) and self.model:
            out["model"] = served  # callers see the name they asked for
        return out

    async def aclose(self) -> None:
        await self.http.close()
