"""A model server that returns calls to tools the request did not declare. Rollgate's own keeps
such calls as message text (model_server/toolcalls.py); another server may not, so the agent and
the environment adapters still defend against them, and their tests need a model that does it:
this wrapper declares the invented names to the wrapped service before each call."""

from __future__ import annotations

from typing import Any


class LaxModelServer:
    def __init__(self, service: Any, invented: list[str]):
        self.service = service
        self.served_name = service.served_name
        self.extra = [{"type": "function", "name": name} for name in invented]

    async def create(self, request: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        tools = [*(request.get("tools") or []), *self.extra]
        return await self.service.create({**request, "tools": tools}, **kwargs)
