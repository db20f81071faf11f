"""Reading a model server's capture sessions (rollgate.model_server.capture) from the agent side.

A black-box harness calls the model itself, under a capture session named by its base URL; the
agent reads what was recorded while the harness runs (to enforce call and token budgets) and
takes the record when the episode ends. Two shapes, one interface: the in-process store of the
embedded stack, and the model server's `GET/DELETE /v1/captures/{session}` routes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from rollgate.core.errors import NotFound
from rollgate.core.http import NO_RETRY, HttpClient


@dataclass(frozen=True)
class CaptureUsage:
    """What a session has used so far: the budgets of a harness episode are counted on this."""

    calls: int = 0
    output_tokens: int = 0
    dropped_calls: int = 0


def usage_of(session: dict[str, Any] | None) -> CaptureUsage:
    if not session:
        return CaptureUsage()
    calls = session.get("calls") or []
    out = sum(len(c.get("generation_token_ids") or []) for call in calls for c in call.get("choices") or [])
    return CaptureUsage(calls=len(calls), output_tokens=out, dropped_calls=int(session.get("dropped_calls") or 0))


class CaptureSource(Protocol):
    async def get(self, session: str) -> dict[str, Any] | None:
        """The session's record (the `GET /v1/captures/{session}` body); None while it has no call."""
        ...

    async def pop(self, session: str) -> dict[str, Any] | None:
        """Take the record and forget the session; later calls of it are not recorded."""
        ...

    async def aclose(self) -> None: ...


class StoreCaptures:
    """The embedded shape: the model service's own CaptureStore, in this process and event loop."""

    def __init__(self, store: Any):
        self.store = store

    async def get(self, session: str) -> dict[str, Any] | None:
        try:
            return self.store.get(session)
        except NotFound:
            return None

    async def pop(self, session: str) -> dict[str, Any] | None:
        try:
            return self.store.pop(session)
        except NotFound:
            return None

    async def aclose(self) -> None:
        return None


class HttpCaptures:
    """The distributed shape: the model server (or the gateway, which pins a session to the
    replica holding it) over HTTP."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 30.0):
        headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        self.http = HttpClient(base_url, component="model", timeout_s=timeout_s, headers=headers, retry=NO_RETRY)

    async def _call(self, method: str, session: str) -> dict[str, Any] | None:
        try:
            return await self.http.request(method, f"/v1/captures/{session}", idempotent=method == "GET")
        except NotFound:
            return None

    async def get(self, session: str) -> dict[str, Any] | None:
        return await self._call("GET", session)

    async def pop(self, session: str) -> dict[str, Any] | None:
        return await self._call("DELETE", session)

    async def aclose(self) -> None:
        await self.http.close()
