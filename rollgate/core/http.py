"""The one HTTP client every part uses to call another: pooled connections, orjson, a bounded
timeout on every call, and bounded retries with backoff and jitter for transient transport
errors only. Failures come back as typed errors naming the component.

Three ways to call: `request` (JSON in, JSON out, an error status raised as a typed error),
`send` (bytes in and out, the status left to the caller: the sandbox service, the weights
fan-out) and `open` (the answer's body read as it arrives: the gateway's proxy relays SSE)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import aiohttp
from yarl import URL

from rollgate.core import jsonutil
from rollgate.core.channel import Channel, Refused
from rollgate.core.errors import (
    UpstreamError,
    UpstreamTimeout,
    error_from_body,
)
from rollgate.core.retry import NO_RETRY, RetryPolicy

__all__ = ["NO_RETRY", "HttpClient", "Reply", "RetryPolicy", "Streamed"]

T = TypeVar("T")
# How long an idle pooled connection is kept: below every server's keep-alive, so the client,
# never the server, closes it. Rollgate's servers keep 75 s (serving.py); uvicorn's default, which
# vLLM (VLLM_HTTP_TIMEOUT_KEEP_ALIVE), NeMo Gym's and OpenEnv's servers run with, is 5 s. At 15 s a
# connection reused just as vLLM closed it failed a GRPO step's first completion (ServerDisconnected).
CLIENT_KEEPALIVE_S = 3.0
_NO_CEIL = float("inf")  # fire at the deadline itself (aiohttp rounds timeouts >= 5 s up to a second)


@dataclass(frozen=True, slots=True)
class Reply:
    """A whole answer whose status the caller judges (`HttpClient.send`)."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return jsonutil.loads(self.body)


class Streamed:
    """An answer whose headers are in and whose body is read as it arrives (`HttpClient.open`):
    `chunks()` yields each piece the socket delivers, unbuffered; `aclose()` hands the
    connection back (kept for reuse once the body was read whole, closed otherwise)."""

    __slots__ = ("status", "headers", "raw_headers", "_resp", "_what", "_component", "_idle_s")

    def __init__(self, resp: aiohttp.ClientResponse, what: str, component: str, idle_s: float):
        self.status = resp.status
        self.headers = resp.headers
        self.raw_headers = resp.raw_headers
        self._resp = resp
        self._what = what
        self._component = component
        self._idle_s = idle_s

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._resp.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
            raise self._broken(exc) from None

    async def read(self) -> bytes:
        try:
            return await self._resp.read()
        except (aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
            raise self._broken(exc) from None

    def _broken(self, exc: BaseException) -> UpstreamError:
        if isinstance(exc, TimeoutError):
            return UpstreamTimeout(f"{self._what} sent nothing for {self._idle_s:g}s", component=self._component)
        return UpstreamError(
            f"{self._what} broke off: {type(exc).__name__}: {exc}", component=self._component, transient=True
        )

    async def aclose(self) -> None:
        self._resp.release()


class HttpClient:
    """A client bound to one base URL. Reuse one per upstream: it pools connections."""

    def __init__(
        self,
        base_url: str,
        *,
        component: str,
        timeout_s: float = 30.0,
        connect_timeout_s: float | None = None,
        retry: RetryPolicy | None = None,
        headers: dict[str, str] | None = None,
        content_type: str | None = "application/json",
        limit: int = 0,
        channel: bool = False,
    ):
        """`content_type`: that of a body whose call names none (None: none, as a proxy wants)."""
        self.base_url = base_url.rstrip("/")
        self.component = component
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retry = retry or RetryPolicy()
        self.headers = {"content-type": content_type, **(headers or {})} if content_type else dict(headers or {})
        self._limit = limit
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}
        # Rollgate upstreams: requests multiplexed over one WebSocket (core/channel.py), HTTP otherwise
        self._channel = Channel(self.base_url, component=component, headers=headers) if channel else None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # Idle connections are dropped before the server's keep-alive (CLIENT_KEEPALIVE_S):
            # reusing one the server is closing fails a request that must not be retried (a tool call).
            connector = aiohttp.TCPConnector(limit=self._limit, keepalive_timeout=CLIENT_KEEPALIVE_S, ttl_dns_cache=300)
            # No cookie jar: a cookie one caller's answer set must never ride on another's request
            # (the gateway's proxy serves every client through the same clients).
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers=self.headers,
                json_serialize=jsonutil.dumps_str,
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("content-type",),  # never invent one (aiohttp's octet-stream)
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
        call = partial(self._once, method, path, json, headers)
        return await self._retrying(method, path, call, timeout_s, deadline, idempotent)

    async def send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        data: bytes | None = None,
        params: Mapping[str, str | int] | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
        deadline: float | None = None,
        idempotent: bool = False,
    ) -> Reply:
        """Send one request (`json`, or raw `data` with its content type in `headers`) and return
        the whole answer, whatever its status. `path` goes as it is (already percent-encoded);
        `params` are encoded. Timeouts and retries as `request`'s; an HTTP status is the caller's."""
        url = URL(self.base_url + path, encoded=True)
        body = data
        if json is not None:
            body = jsonutil.dumps(json)
            if "content-type" not in self.headers:
                headers = {"content-type": "application/json", **(headers or {})}
        call = partial(self._send_once, method, url, body, params, headers)
        return await self._retrying(method, path, call, timeout_s, deadline, idempotent)

    async def open(
        self, method: str, path: str, *, data: bytes | None = None, headers: dict[str, str] | None = None
    ) -> Streamed:
        """Send one request and return its answer as soon as the headers are in (`Streamed`),
        for a caller that relays the body as it arrives. `path` goes as it is (already
        percent-encoded, query included). Never retried: the caller decides (a refused connection
        carries `not_sent`). `timeout_s` bounds each wait for data (connecting: `connect_timeout_s`),
        not the whole answer, which may stream for as long as it keeps sending."""
        url = URL(self.base_url + path, encoded=True)
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=self.timeout_s,  # a free connection in the pool, then the connect itself
            sock_connect=self.connect_timeout_s,
            sock_read=self.timeout_s,
            ceil_threshold=_NO_CEIL,
        )
        try:
            resp = await self._get_session().request(method, url, data=data, headers=headers, timeout=timeout)
        except (aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
            raise self._failed(exc, method, str(url), f"answered nothing within {self.timeout_s:g}s") from None
        return Streamed(resp, f"{method} {url}", self.component, self.timeout_s)

    async def _retrying(
        self,
        method: str,
        path: str,
        call: Callable[[float], Awaitable[T]],
        timeout_s: float | None,
        deadline: float | None,
        idempotent: bool,
    ) -> T:
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
                return await call(budget)
            except UpstreamError as exc:
                failed += 1
                retryable = exc.transient and (idempotent or getattr(exc, "not_sent", False))
                # wait() refuses a wait that would reach `end`: the retry always has time left
                if not retryable or not await self.retry.wait(failed, deadline=end):
                    raise
            budget = max(end - time.monotonic(), 0.001)

    def _total_timeout(self, timeout_s: float) -> aiohttp.ClientTimeout:
        # aiohttp's own per-request timer bounds connect, send and the whole body read; a second
        # asyncio.timeout around it cost ~1/10 of a small request's client CPU.
        t = self._timeouts.get(timeout_s)
        if t is None:
            if len(self._timeouts) > 256:  # callers pass a handful of distinct values; stay bounded
                self._timeouts.clear()
            t = self._timeouts[timeout_s] = aiohttp.ClientTimeout(
                total=timeout_s, sock_connect=self.connect_timeout_s, ceil_threshold=_NO_CEIL
            )
        return t

    def _failed(self, exc: BaseException, method: str, url: str, slow: str) -> UpstreamError:
        """A transport failure as a typed error: a timeout (`slow` says how), a refused connection
        (`not_sent`: nothing reached the upstream, so any method may be retried), or a break."""
        if isinstance(exc, TimeoutError):
            return UpstreamTimeout(f"{method} {url} {slow}", component=self.component)
        if isinstance(exc, aiohttp.ClientConnectorError):
            err = UpstreamError(
                f"cannot connect to {self.base_url}: {exc.os_error or exc}", component=self.component, transient=True
            )
            err.not_sent = True  # type: ignore[attr-defined]
            return err
        return UpstreamError(
            f"{method} {url} failed: {type(exc).__name__}: {exc}", component=self.component, transient=True
        )

    async def _once(self, method, path, json, headers, timeout_s) -> Any:
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
        except (aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
            raise self._failed(exc, method, url, f"took longer than {timeout_s:g}s") from None
        return self._parse(raw, status)

    async def _send_once(self, method, url, data, params, headers, timeout_s) -> Reply:
        try:
            async with self._get_session().request(
                method, url, data=data, params=params, headers=headers, timeout=self._total_timeout(timeout_s)
            ) as resp:
                return Reply(resp.status, resp.headers, await resp.read())
        except (aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
            raise self._failed(exc, method, str(url), f"took longer than {timeout_s:g}s") from None

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
