"""The one HTTP client every part uses to call another: pooled connections, orjson, a bounded
timeout on every call, and bounded retries with backoff and jitter for transient transport
errors only. Failures come back as typed errors naming the component."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from rollgate.core import jsonutil
from rollgate.core.channel import Channel, Refused
from rollgate.core.errors import (
    UpstreamError,
    UpstreamTimeout,
    error_from_body,
)
from rollgate.core.retry import NO_RETRY, RetryPolicy

__all__ = ["NO_RETRY", "HttpClient", "RetryPolicy"]


CLIENT_KEEPALIVE_S = 15.0


class HttpClient:
    """A JSON client bound to one base URL. Reuse one per upstream: it pools connections."""

    def __init__(
        self,
        base_url: str,
        *,
        component: str,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        headers: dict[str, str] | None = None,
        limit: int = 0,
        channel: bool = False,
    ):
        self.base_url = base_url.rstrip("/")
        self.component = component
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.headers = {"content-type": "application/json", **(headers or {})}
        self._limit = limit
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}
        # Rollgate upstreams: requests multiplexed over one WebSocket (core/channel.py), HTTP otherwise
        self._channel = Channel(self.base_url, component=component, headers=headers) if channel else None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # Idle connections are dropped well before the server's keep-alive (serving.py: 75 s):
            # reusing one the server is closing fails a request that must not be retried (a tool call).
            connector = aiohttp.TCPConnector(limit=self._limit, keepalive_timeout=CLIENT_KEEPALIVE_S, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(
                connector=connector, headers=self.headers, json_serialize=jsonutil.dumps_str
            )
        return self._session

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        json: Any = None,
        *,
        timeout_s: float | None = None,
        deadline: float | None = None,
        idempotent: bool = False,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """Send one request; return the parsed JSON body (None for an empty body).

        `timeout_s` bounds the whole call, retries and their waits included (one deadline per
        call), and `deadline` (absolute, time.monotonic()) caps it further, e.g. at the episode's.
        Connection failures (nothing was sent) are retried for every method; timeouts and 5xx
        answers only when `idempotent`, so a tool call is never executed twice."""
        budget = timeout_s or self.timeout_s
        now = time.monotonic()
        end = now + budget
        if deadline is not None and deadline < end:
            end, budget = deadline, deadline - now
            if budget <= 0:
                raise UpstreamTimeout(
                    f"{method} {self.base_url}{path}: its deadline has passed", component=self.component
                )
        failed = 0
        while True:
            try:
                return await self._once(method, path, json, budget, headers)
            except UpstreamError as exc:
                failed += 1
                retryable = exc.transient and (idempotent or getattr(exc, "not_sent", False))
                # wait() refuses a wait that would reach `end`: the retry always has time left
                if not retryable or not await self.retry.wait(failed, deadline=end):
                    raise
            budget = max(end - time.monotonic(), 0.001)

    def _total_timeout(self, timeout_s: float) -> aiohttp.ClientTimeout:
        # aiohttp's own per-request timer bounds connect, send and the whole body read; a second
        # asyncio.timeout around it cost ~1/10 of a small request's client CPU. ceil_threshold=inf:
        # fire at the deadline itself (aiohttp otherwise rounds timeouts >= 5 s up to a whole second).
        t = self._timeouts.get(timeout_s)
        if t is None:
            if len(self._timeouts) > 256:  # callers pass a handful of distinct values; stay bounded
                self._timeouts.clear()
            t = self._timeouts[timeout_s] = aiohttp.ClientTimeout(total=timeout_s, ceil_threshold=float("inf"))
        return t

    async def _once(self, method, path, json, timeout_s, headers) -> Any:
        if self._channel is not None and self._channel.usable:
            try:
                status, raw = await self._channel.request(
                    self._get_session(),
                    method,
                    path,
                    jsonutil.dumps(json) if json is not None else b"",
                    timeout_s,
                    headers,
                )
            except Refused:
                pass  # the upstream does not speak the channel: HTTP from now on
            else:
                return self._parse(raw, status)
        url = self.base_url + path
        data = jsonutil.dumps(json) if json is not None else None
        try:
            async with self._get_session().request(
                method, url, data=data, headers=headers, timeout=self._total_timeout(timeout_s)
            ) as resp:
                raw = await resp.read()
                status = resp.status
        except TimeoutError:
            raise UpstreamTimeout(f"{method} {url} took longer than {timeout_s:g}s", component=self.component) from None
        except aiohttp.ClientConnectorError as exc:
            err = UpstreamError(
                f"cannot connect to {self.base_url}: {exc.os_error or exc}", component=self.component, transient=True
            )
            err.not_sent = True  # type: ignore[attr-defined]
            raise err from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise UpstreamError(
                f"{method} {url} failed: {type(exc).__name__}: {exc}", component=self.component, transient=True
            ) from None
        return self._parse(raw, status)

    def _parse(self, raw: bytes, status: int) -> Any:
        body: Any = None
        if raw:
            try:
                body = jsonutil.loads(raw)
            except jsonutil.JSONDecodeError:
                body = raw.decode(errors="replace")
        if status >= 400:
            raise error_from_body(body, component=self.component, status=status)
        return body

    async def stream_lines(
        self, method: str, path: str, json: Any = None, *, timeout_s: float | None = None, idle_timeout_s: float = 60.0
    ) -> AsyncIterator[bytes]:
        """Yield the non-empty lines of a streamed body (NDJSON or SSE)."""
        url = self.base_url + path
        data = jsonutil.dumps(json) if json is not None else None
        timeout = aiohttp.ClientTimeout(total=timeout_s, sock_read=idle_timeout_s)
        try:
            async with self._get_session().request(method, url, data=data, timeout=timeout) as resp:
                if resp.status >= 400:
                    raw = await resp.read()
                    try:
                        body = jsonutil.loads(raw)
                    except jsonutil.JSONDecodeError:
                        body = raw.decode(errors="replace")
                    raise error_from_body(body, component=self.component, status=resp.status)
                async for line in resp.content:
                    line = line.strip()
                    if line:
                        yield line
        except (TimeoutError, aiohttp.ServerTimeoutError):
            raise UpstreamTimeout(f"{method} {url} stalled", component=self.component) from None
        except aiohttp.ClientConnectorError as exc:
            raise UpstreamError(
                f"cannot connect to {self.base_url}: {exc}", component=self.component, transient=True
            ) from None
        except aiohttp.ClientError as exc:
            raise UpstreamError(f"{method} {url} failed: {exc}", component=self.component, transient=True) from None
