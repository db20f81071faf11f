"""What the MCP serving tests share: the official SDK's client session on an endpoint, and a
gateway on loopback whose proxy forwards one environment to a served replica. Import it after
`pytest.importorskip("mcp")`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from rollgate.core.metrics import Metrics
from rollgate.core.replicas import ReplicaSet
from rollgate.core.settings import Settings
from rollgate.gateway.proxy import Forwarder, proxy_router
from rollgate.gateway.server import create_gateway_app
from rollgate.jobs import make_queue
from tests.gateway.serving import serve_here


@contextlib.asynccontextmanager
async def mcp_session(url: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx.AsyncClient(timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def gateway_in_front(replica: str, env: str) -> AsyncIterator[str]:
    """A gateway (no auth) whose proxy sends environment `env` to the resources server at
    `replica`; yields the gateway's base URL."""
    settings = Settings()
    forwarder = Forwarder()
    proxy = proxy_router(forwarder, model=None, envs={env: ReplicaSet([replica], what=f"env {env}")})
    gateway = create_gateway_app(
        settings,
        make_queue(settings),
        known_envs=lambda: [env],
        routers=[proxy],
        metrics=Metrics(),
        api_key=None,
        on_shutdown=[forwarder.aclose],
    )
    async with serve_here(gateway) as front:
        yield front
