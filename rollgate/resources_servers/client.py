"""How the agent reaches an environment: one interface, in-process or over HTTP."""

from __future__ import annotations

from typing import Any, Protocol

from rollgate.core.http import HttpClient, RetryPolicy
from rollgate.core.schemas import RoleView, SeedResponse, TaskRow, ToolOutput, VerifyRequest, VerifyResult
from rollgate.resources_servers.base import EnvRuntime


class EnvClient(Protocol):
    name: str

    async def tools(self) -> list[dict[str, Any]]: ...
    async def seed(self, task: TaskRow, *, timeout_s: float | None = None) -> SeedResponse: ...
    async def call_tool(
        self, session_id: str, name: str, arguments: Any, *, timeout_s: float | None = None, role: str | None = None
    ) -> ToolOutput: ...
    async def verify(
        self, session_id: str, request: VerifyRequest, *, timeout_s: float | None = None
    ) -> VerifyResult: ...
    async def close(self, session_id: str, *, timeout_s: float | None = None) -> None: ...
    # a multi-role environment (docs/roles.md): each role's tools, and one role's view of a session
    async def roles(self) -> dict[str, Any]: ...
    async def observe(
        self, session_id: str, role: str, *, timeout_s: float | None = None, peek: bool = False
    ) -> RoleView: ...  # peek: whose turn only, nothing marked as seen
    async def aclose(self) -> None: ...  # the client's own connections, at shutdown


class LocalEnvClient:
    """The embedded shape: direct calls into the runtime, no serialisation on the way."""

    def __init__(self, runtime: EnvRuntime):
        self.runtime = runtime
        self.name = runtime.name

    async def tools(self) -> list[dict[str, Any]]:
        return self.runtime.tools()

    async def seed(self, task, *, timeout_s=None) -> SeedResponse:
        return await self.runtime.seed(task)

    async def call_tool(self, session_id, name, arguments, *, timeout_s=None, role=None) -> ToolOutput:
        return await self.runtime.call_tool(session_id, name, arguments, role)

    async def roles(self) -> dict[str, Any]:
        return {"roles": self.runtime.role_tools(), "zero_sum": self.runtime.env.zero_sum}

    async def observe(self, session_id, role, *, timeout_s=None, peek=False) -> RoleView:
        return await self.runtime.observe(session_id, role, peek=peek)

    async def verify(self, session_id, request, *, timeout_s=None) -> VerifyResult:
        return await self.runtime.verify(session_id, request)

    async def close(self, session_id, *, timeout_s=None) -> None:
        await self.runtime.close(session_id)

    async def aclose(self) -> None:
        """Nothing of its own: the runtime it calls is closed by whoever made it."""


class HttpEnvClient:
    """The distributed shape: the native routes of a resources server (or a gateway's /envs/{name})."""

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        timeout_s: float = 30.0,
        headers: dict | None = None,
        retry: RetryPolicy | None = None,
        channel: bool = False,
    ):
        self.name = name
        self.http = HttpClient(
            base_url, component=f"env:{name}", timeout_s=timeout_s, headers=headers, retry=retry, channel=channel
        )
        self._tools: list[dict[str, Any]] | None = None

    async def tools(self) -> list[dict[str, Any]]:
        if self._tools is None:
            self._tools = await self.http.request("GET", "/tools", idempotent=True)
        return self._tools

    async def seed(self, task, *, timeout_s=None) -> SeedResponse:
        body = await self.http.request("POST", "/sessions", task.row(), timeout_s=timeout_s)
        return SeedResponse.model_validate(body)

    async def call_tool(self, session_id, name, arguments, *, timeout_s=None, role=None) -> ToolOutput:
        payload = {"arguments": arguments} if role is None else {"arguments": arguments, "role": role}
        body = await self.http.request("POST", f"/sessions/{session_id}/tools/{name}", payload, timeout_s=timeout_s)
        return ToolOutput.model_validate(body)

    async def roles(self) -> dict[str, Any]:
        return await self.http.request("GET", "/roles", idempotent=True)

    async def observe(self, session_id, role, *, timeout_s=None, peek=False) -> RoleView:
        payload = {"role": role, "peek": True} if peek else {"role": role}
        body = await self.http.request(
            "POST", f"/sessions/{session_id}/observe", payload, timeout_s=timeout_s, idempotent=peek
        )
        return RoleView.model_validate(body)

    async def verify(self, session_id, request, *, timeout_s=None) -> VerifyResult:
        body = await self.http.request(
            "POST",
            f"/sessions/{session_id}/verify",
            request.model_dump(exclude_none=True),
            timeout_s=timeout_s,
            idempotent=True,
        )
        return VerifyResult.model_validate(body)

    async def close(self, session_id, *, timeout_s=None) -> None:
        await self.http.request("DELETE", f"/sessions/{session_id}", timeout_s=timeout_s, idempotent=True)

    async def aclose(self) -> None:
        await self.http.close()
