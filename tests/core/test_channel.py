"""The internal channel (core/channel.py): the hot routes of real servers on loopback, called over
one multiplexed WebSocket, answer exactly as over HTTP (errors included); requests in flight when
the connection drops fail typed; a timeout is a timeout; and an upstream or a path the channel
does not serve is called over plain HTTP, so nothing depends on the far side speaking it."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi import FastAPI

from rollgate.core.channel import Channel, join_frames, pack_request, split_frames, unpack_request
from rollgate.core.errors import NotFound, UpstreamError, UpstreamTimeout
from rollgate.core.http import HttpClient
from rollgate.core.schemas import TaskRow, VerifyRequest
from rollgate.core.serving import serve_in_thread
from rollgate.core.session_store import MemorySessionStore
from rollgate.core.settings import Settings
from rollgate.resources_servers.app import create_resources_app
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.client import HttpEnvClient
from rollgate.resources_servers.registry import load_env
from rollgate.resources_servers.server import build_multi_app

ROW = TaskRow.model_validate({"responses_create_params": {"input": "What is 6 * 7?"}, "expected_answer": "42"})
ANSWER = VerifyRequest(response="42")


@pytest.fixture(scope="module")
def math_url():
    app = create_resources_app(EnvRuntime(load_env("math"), MemorySessionStore()))
    with serve_in_thread(app) as url:
        yield url


def test_frames_round_trip():
    frame = pack_request(7, "POST", "/sessions/a b/tools/x", b'{"k":1}', {"X-Trace": "t"})
    assert unpack_request(frame) == (7, "POST", "/sessions/a b/tools/x", [(b"x-trace", b"t")], b'{"k":1}')
    assert unpack_request(pack_request(1, "GET", "/tools", b"", None)) == (1, "GET", "/tools", [], b"")
    assert split_frames(join_frames([frame, b"", b"x"])) == [frame, b"", b"x"]
    with pytest.raises(ValueError, match="truncated"):
        split_frames(join_frames([frame])[:-1])


async def test_the_channel_answers_as_http_does(math_url):
    over_channel = HttpEnvClient("math", math_url, channel=True)
    over_http = HttpEnvClient("math", math_url)
    try:
        answers = []
        for client in (over_channel, over_http):
            sid = (await client.seed(ROW)).session_id
            out = await client.call_tool(sid, "calculator", {"expression": "6*7"})
            bad = await client.call_tool(sid, "calculator", {"nope": 1})
            verdict = await client.verify(sid, ANSWER)
            with pytest.raises(NotFound) as unknown:
                await client.call_tool(sid, "reset", {})
            answers.append((out, bad.is_error, verdict.reward, unknown.value.message))
        assert answers[0] == answers[1]
        channel = over_channel.http._channel
        assert channel is not None and channel.usable and channel._ws is not None  # it really went over it
        assert channel._hits == 5 and channel._misses == 0
    finally:
        await over_channel.http.close()
        await over_http.http.close()


async def test_many_requests_share_one_connection_and_come_back_to_their_callers(math_url):
    client = HttpEnvClient("math", math_url, channel=True)
    try:
        sids = [(await client.seed(ROW.model_copy(update={"seed": i}))).session_id for i in range(3)]
        exprs = [f"{i}*{j}" for i in range(1, 11) for j in range(1, 6)]
        outs = await asyncio.gather(
            *(client.call_tool(sids[k % 3], "calculator", {"expression": e}) for k, e in enumerate(exprs))
        )
        assert [o.output for o in outs] == [str(eval(e)) for e in exprs]  # noqa: S307 - our own strings
        assert not client.http._channel._pending
    finally:
        await client.http.close()


async def test_a_path_the_channel_does_not_serve_goes_over_http(tiny_model_dir):
    # a family's service serves /envs/<name>/... with FastAPI routes, not hot routes
    app = build_multi_app(Settings(envs=["math"]), ["math"], title="math")
    with serve_in_thread(app) as url:
        client = HttpEnvClient("math", f"{url}/envs/math", channel=True)
        try:
            for _ in range(5):
                sid = (await client.seed(ROW)).session_id
                assert (await client.verify(sid, ANSWER)).reward == 1.0
            assert client.http._channel.usable is False  # after a few misses it stops asking
        finally:
            await client.http.close()


async def test_an_upstream_without_the_channel_is_called_over_http():
    app = FastAPI()

    @app.post("/v1/echo")
    async def echo(body: dict) -> dict:
        return body

    with serve_in_thread(app) as url:
        client = HttpClient(url, component="model", channel=True)
        try:
            assert await client.request("POST", "/v1/echo", {"a": 1}) == {"a": 1}
            assert client._channel.usable is False
            assert await client.request("POST", "/v1/echo", {"a": 2}) == {"a": 2}
        finally:
            await client.close()


async def test_a_dropped_connection_fails_what_was_in_flight_and_the_next_call_reconnects(math_url):
    client = HttpEnvClient("math", math_url, channel=True)
    try:
        sid = (await client.seed(ROW)).session_id
        channel: Channel = client.http._channel
        loop = asyncio.get_running_loop()
        orphan = channel._pending[999_999] = loop.create_future()  # a request the server never answers
        await channel._ws.close()
        with pytest.raises(UpstreamError, match="connection closed"):
            await asyncio.wait_for(orphan, 5)
        out = await client.call_tool(sid, "calculator", {"expression": "2+2"})
        assert out.output == "4"
    finally:
        await client.http.close()


async def test_a_slow_answer_is_a_timeout_naming_the_call():
    app = create_resources_app(EnvRuntime(load_env("math"), MemorySessionStore()))
    slow_app = app

    async def stall(params, body):  # a hot route that never answers in time
        await asyncio.sleep(5)

    from rollgate.core.app import hot_route

    hot_route(slow_app, "POST", "/stall", stall)
    with serve_in_thread(slow_app) as url:
        client = HttpClient(url, component="env:math", channel=True, timeout_s=0.3)
        try:
            with pytest.raises(UpstreamTimeout, match="POST /stall took longer than 0.3s"):
                await client.request("POST", "/stall", {})
            assert json.dumps(await client.request("GET", "/tools", idempotent=True))  # the channel still works
        finally:
            await client.close()
