"""The HTTP side of the NeMo Gym kind: one connection pool, no shared cookie jar, and every
failure typed and naming "NeMo Gym server <url>" (interop/nemo_gym.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import httpx

from rollgate.core import jsonutil
from rollgate.core.errors import ProtocolError, UpstreamError, UpstreamTimeout
from rollgate.core.http import CLIENT_KEEPALIVE_S

COMPONENT = "nemo_gym"


def describe(url: str) -> str:
    return f"NeMo Gym server {url}"


def snippet(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").strip()
    return text if len(text) <= 300 else text[:300] + "..."


def _expired(morsel: Any) -> bool:
    # Starlette deletes its session cookie with max-age 0 and a date in 1970.
    return str(morsel.get("max-age", "")) == "0" or "1970" in str(morsel.get("expires", ""))


def read_json(raw: bytes, url: str, what: str) -> Any:
    try:
        return jsonutil.loads(raw)
    except jsonutil.JSONDecodeError:
        raise ProtocolError(
            f"{describe(url)} answered {what} with malformed JSON: {snippet(raw)!r}", component=COMPONENT
        ) from None


def get_openapi(url: str, timeout_s: float) -> Any:
    """The server's OpenAPI document (blocking: read once, when the environment is built)."""
    try:
        resp = httpx.get(f"{url}/openapi.json", timeout=timeout_s)
    except httpx.TimeoutException:
        raise UpstreamTimeout(
            f"{describe(url)} did not answer GET /openapi.json within {timeout_s:g}s", component=COMPONENT
        ) from None
    except httpx.HTTPError as exc:
        raise UpstreamError(
            f"{describe(url)} is unreachable (GET /openapi.json): {type(exc).__name__}: {exc}", component=COMPONENT
        ) from None
    if resp.status_code != 200:
        raise UpstreamError(
            f"{describe(url)} answered HTTP {resp.status_code} to GET /openapi.json: {snippet(resp.content)}",
            component=COMPONENT,
            status=resp.status_code,
        )
    return read_json(resp.content, url, "GET /openapi.json")


class NemoGymHttp:
    """POSTs the protocol's calls. One pool per event loop, and no cookie jar: each session's
    cookies travel in its State, never in a jar that every session of this process would share."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _client(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            self._session = aiohttp.ClientSession(
                cookie_jar=aiohttp.DummyCookieJar(),
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=CLIENT_KEEPALIVE_S),
            )
            self._loop = loop
        return self._session

    async def post(
        self, url: str, route: str, body: Any, cookies: dict[str, str], timeout_s: float
    ) -> tuple[int, bytes, dict[str, str | None]]:
        """POST one call. Returns (status, body, the cookies it set: None for a deleted one).
        An unreachable server raises UpstreamError with `not_sent` set (nothing reached it)."""
        headers = {"content-type": "application/json"}
        if cookies:
            headers["cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
        try:
            async with self._client().post(
                f"{url}/{route}",
                data=jsonutil.dumps(body),
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as resp:
                raw = await resp.read()
                jar = {k: (None if _expired(m) else m.value) for k, m in resp.cookies.items()}
                return resp.status, raw, jar
        except TimeoutError:
            raise UpstreamTimeout(
                f"{describe(url)} did not answer POST /{route} within {timeout_s:g}s", component=COMPONENT
            ) from None
        except aiohttp.ClientConnectorError as exc:
            err = UpstreamError(
                f"{describe(url)} is unreachable (POST /{route}): {exc.os_error or exc}",
                component=COMPONENT,
                transient=True,
            )
            err.not_sent = True  # type: ignore[attr-defined]
            raise err from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise UpstreamError(
                f"{describe(url)} failed on POST /{route}: {type(exc).__name__}: {exc}",
                component=COMPONENT,
                transient=True,
            ) from None

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None
