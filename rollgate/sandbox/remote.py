"""The remote provider: sandboxes of a sandbox service (`rollgate serve --role sandbox`, see
service.py) over its authenticated HTTP API. The code environment uses it where its own process
cannot isolate code (an unprivileged container) and a dedicated sandbox service can.

Before the first sandbox, the provider asks the service what it isolates and refuses an
unisolated service unless `allow_unisolated` is set, like the local provider.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Sequence
from typing import Any

from rollgate.core.errors import UpstreamError
from rollgate.core.http import NO_RETRY, HttpClient, Reply
from rollgate.core.metrics import Metrics
from rollgate.sandbox.base import ExecResult, SandboxError, as_bytes, check_exec_args

_SLACK_S = 15.0  # HTTP round trip and the service's own kill / sweep after the wall clock


class RemoteSandbox:
    def __init__(self, provider: RemoteProvider, sandbox_id: str, workdir: str | None):
        self.id = sandbox_id
        self.workdir = workdir  # the service's path, for messages and tests only
        self.provider = provider
        self._destroyed = False

    def _path(self, suffix: str = "") -> str:
        return f"/v1/sandboxes/{self.id}{suffix}"

    async def exec(
        self,
        cmd: Sequence[str] | None = None,
        *,
        code: str | None = None,
        stdin: str | bytes = b"",
        timeout_s: float | None = None,
    ) -> ExecResult:
        check_exec_args(cmd, code)
        if self._destroyed:
            raise SandboxError(f"sandbox {self.id} was destroyed", field="sandbox")
        body: dict[str, Any] = {"cmd": list(cmd) if cmd is not None else None, "code": code, "timeout_s": timeout_s}
        body["stdin_b64"] = base64.b64encode(as_bytes(stdin)).decode()
        wait = (timeout_s or self.provider.exec_timeout_s) + _SLACK_S
        resp = await self.provider.request("POST", self._path("/exec"), json=body, timeout_s=wait)
        result = ExecResult.model_validate_json(resp.body)
        self.provider.metrics.sandbox_execs.labels(result=result.label).inc()
        return result

    async def write_file(self, path: str, data: str | bytes) -> None:
        octets = {"content-type": "application/octet-stream"}
        await self.provider.request(
            "PUT", self._path("/files"), params={"path": path}, data=as_bytes(data), headers=octets
        )

    async def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        params: dict[str, Any] = {"path": path}
        if max_bytes:
            params["max_bytes"] = max_bytes
        return (await self.provider.request("GET", self._path("/files"), params=params)).body

    async def destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        await self.provider.request("DELETE", self._path(), ok_missing=True)


class RemoteProvider:
    """Options: `url` (the sandbox service), `token` (its bearer token), `allow_unisolated`,
    `exec_timeout_s` (the default wall clock the service applies, for the HTTP timeout), `metrics`."""

    name = "remote"

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        allow_unisolated: bool = False,
        exec_timeout_s: float = 10.0,
        connect_timeout_s: float = 5.0,
        metrics: Metrics | None = None,
    ):
        if not url:
            raise SandboxError(
                "the remote sandbox provider needs the sandbox service's URL: set sandbox.url (ROLLGATE_SANDBOX__URL)",
                field="sandbox.url",
            )
        if not token:
            raise SandboxError(
                "the remote sandbox provider needs the sandbox service's token: set sandbox.token "
                "(ROLLGATE_SANDBOX__TOKEN)",
                field="sandbox.token",
            )
        self.url = url.rstrip("/")
        self.allow_unisolated = allow_unisolated
        self.exec_timeout_s = exec_timeout_s
        self.metrics = metrics if metrics is not None else Metrics.off()
        # one try per call: an exec that may have run is never sent again
        self._http = HttpClient(
            self.url,
            component="sandbox",
            timeout_s=60.0,
            connect_timeout_s=connect_timeout_s,
            headers={"authorization": f"Bearer {token}"},
            retry=NO_RETRY,
        )
        self._remote_caps: dict[str, Any] | None = None
        self._checked = asyncio.Lock()

    def capabilities(self) -> dict[str, Any]:
        # Isolation is the service's: it refuses to start unisolated, and create() checks again.
        caps = self._remote_caps or {}
        return {**caps, "provider": self.name, "url": self.url, "network_isolated": caps.get("isolated", "remote")}

    async def request(self, method: str, path: str, *, ok_missing: bool = False, **kw: Any) -> Reply:
        """`kw`: HttpClient.send's (json or data, params, headers, timeout_s)."""
        try:
            resp = await self._http.send(method, path, **kw)
        except UpstreamError as exc:
            raise SandboxError(f"sandbox service at {self.url} unreachable: {exc.message}") from None
        if resp.status == 404 and ok_missing:
            return resp
        if resp.status >= 400:
            text = resp.body[:300].decode(errors="replace")
            try:
                err = resp.json().get("error", {})
                message, field = err.get("message", text), err.get("field")
            except (ValueError, AttributeError):
                message, field = text, None
            if resp.status == 401:
                message += " (sandbox.token must match the sandbox service's token)"
            raise SandboxError(f"sandbox service answered {resp.status}: {message}", field=field)
        return resp

    async def check(self) -> dict[str, Any]:
        """The service's capabilities; refuses an unisolated service unless allowed."""
        async with self._checked:
            if self._remote_caps is None:
                caps = (await self.request("GET", "/v1/capabilities")).json()
                if not caps.get("isolated") and not self.allow_unisolated:
                    raise SandboxError(
                        f"the sandbox service at {self.url} cannot isolate code ({caps.get('detail', 'no detail')}); "
                        "run it where namespaces are allowed, or set sandbox.allow_unisolated: true to accept "
                        "running model code unisolated",
                        field="sandbox.allow_unisolated",
                    )
                self._remote_caps = caps
            return self._remote_caps

    async def create(self) -> RemoteSandbox:
        await self.check()
        body = (await self.request("POST", "/v1/sandboxes")).json()
        return RemoteSandbox(self, body["id"], body.get("workdir"))

    async def close(self) -> None:
        await self._http.close()
