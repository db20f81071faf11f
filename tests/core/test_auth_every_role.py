"""Every service refuses a request without the key, or with a wrong one, when a key is configured;
/healthz and /metrics stay open; WebSockets (the internal channel, OpenEnv's /ws) are refused
without it. Each role is built the way `rollgate serve --role R` builds it and served on loopback.
The agent role's /run goes through the model and resources roles, so its 200 also shows that the
agent's clients (HTTP and the channel) send the key."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import aiohttp
import httpx
import pytest

from rollgate.core.channel import CHANNEL_PATH
from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings

KEY = "s3cret-key"
AUTH = {"authorization": f"Bearer {KEY}"}
ROW = {"responses_create_params": {"input": "What is 6*7?"}, "expected_answer": "42", "task_id": "t1"}


def settings(**kw) -> Settings:
    return Settings(api_key=KEY, model={"backend": "scripted"}, gateway={"ui": False}, **kw)


@contextlib.contextmanager
def model_role() -> Iterator[str]:
    from rollgate.model_server.server import build_app

    with serve_in_thread(build_app(settings()), timeout_s=120) as url:
        yield url


@contextlib.contextmanager
def resources_role() -> Iterator[str]:
    from rollgate.resources_servers.server import build_app

    with serve_in_thread(build_app(settings(), "math")) as url:
        yield url


@contextlib.contextmanager
def gateway_role(redis_url: str) -> Iterator[str]:
    from rollgate.gateway.server import build_app

    with serve_in_thread(build_app(settings(redis_url=redis_url, env_urls={"math": ["http://127.0.0.1:9"]}))) as url:
        yield url


@contextlib.contextmanager
def agent_role() -> Iterator[str]:
    from rollgate.stack.agent_role import build_app

    with model_role() as model, resources_role() as env:
        app = build_app(settings(model_url=model, env_urls={"math": [env]}))
        with serve_in_thread(app) as url:
            yield url


@contextlib.contextmanager
def sandbox_role() -> Iterator[str]:
    from rollgate.sandbox.local import LocalProvider
    from rollgate.sandbox.service import create_sandbox_app

    with serve_in_thread(create_sandbox_app(LocalProvider(), token=KEY)) as url:
        yield url


# (role, a guarded request: method, path, JSON body)
GUARDED = {
    "model": ("POST", "/v1/responses", {"model": "rollgate-tiny", "input": "hi", "max_output_tokens": 4}),
    "resources": ("POST", "/sessions", ROW),
    "gateway": ("GET", "/v1/rollouts", None),
    "agent": ("POST", "/run", ROW),
    "sandbox": ("GET", "/v1/capabilities", None),
}


@pytest.fixture(params=list(GUARDED))
def role(request) -> Iterator[tuple[str, str]]:
    name = request.param
    if name == "gateway":
        cm = gateway_role(request.getfixturevalue("redis_url"))
    else:
        cm = {"model": model_role, "resources": resources_role, "agent": agent_role, "sandbox": sandbox_role}[name]()
    with cm as url:
        yield name, url


def test_every_role_needs_the_key_but_health_and_metrics_stay_open(role):
    name, url = role
    method, path, body = GUARDED[name]
    with httpx.Client(base_url=url, timeout=60) as client:
        missing = client.request(method, path, json=body)
        assert missing.status_code == 401, (name, missing.text)
        assert missing.json()["error"]["field"] == "authorization" and "missing bearer token" in missing.text
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong = client.request(method, path, json=body, headers={"authorization": f"Bearer {KEY}x"})
        assert wrong.status_code == 401 and wrong.json()["error"]["message"] == "wrong bearer token", name
        ok = client.request(method, path, json=body, headers=AUTH)
        assert ok.status_code in (200, 201), (name, ok.text)
        if name == "agent":  # the episode reached the model and the environment with the key
            assert ok.json()["outcome"] == "completed", ok.text
        assert client.get("/healthz").status_code == 200
        assert client.get("/metrics").status_code == 200


async def _handshake(url: str, headers: dict[str, str] | None = None) -> int:
    """The status of a WebSocket handshake: 101 when accepted."""
    ws_url = url.replace("http://", "ws://")
    async with aiohttp.ClientSession() as session:
        try:
            async with session.ws_connect(ws_url, headers=headers or {}) as ws:
                await ws.close()
                return 101
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


@pytest.mark.parametrize("server", ["model", "resources"])
def test_the_internal_channel_needs_the_key(server):
    with (model_role if server == "model" else resources_role)() as url:
        assert asyncio.run(_handshake(url + CHANNEL_PATH)) == 403
        assert asyncio.run(_handshake(url + CHANNEL_PATH, {"authorization": "Bearer nope"})) == 403
        assert asyncio.run(_handshake(url + CHANNEL_PATH, AUTH)) == 101


def test_openenv_websocket_of_a_resources_server_needs_the_key():
    with resources_role() as url:
        assert asyncio.run(_handshake(url + "/openenv/ws")) == 403
        assert asyncio.run(_handshake(url + "/openenv/ws", AUTH)) == 101


def test_a_channel_request_with_the_key_is_served_over_the_channel():
    """The agent's path to a resources server: a request over the channel, with the key."""
    from rollgate.core.http import HttpClient

    async def seed(url: str) -> tuple[dict, int]:
        client = HttpClient(url, component="env:math", headers=AUTH, channel=True)
        try:
            return await client.request("POST", "/sessions", ROW), client._channel._hits
        finally:
            await client.close()

    with resources_role() as url:
        seeded, over_channel = asyncio.run(seed(url))
        assert seeded["session_id"] and over_channel == 1
