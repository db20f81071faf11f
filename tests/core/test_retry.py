"""One retry schedule (rollgate.core.retry) and one deadline per call, over real loopback servers:
a stalled one (accepts, never answers: tests/stalled.py) and a healthy one (uvicorn)."""

from __future__ import annotations

import time

import pytest

from rollgate.core.errors import UpstreamError, UpstreamTimeout
from rollgate.core.http import HttpClient
from rollgate.core.replicas import ReplicaSet
from rollgate.core.retry import RetryPolicy
from rollgate.core.serving import serve_in_thread
from rollgate.model_server.client import HttpModelClient
from tests.stalled import stalled_server


async def healthy_app(scope, receive, send) -> None:
    """Answers every request with a small Responses body naming itself."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"id": "resp_healthy", "output": []}'})


@pytest.fixture(scope="module")
def healthy_url():
    with serve_in_thread(healthy_app) as url:
        yield url


def test_no_wait_after_the_last_attempt():
    policy = RetryPolicy(3, backoff_s=1.0, max_backoff_s=1.0, jitter=0.0)
    t = time.monotonic()
    assert policy.wait_sync(3) is False  # the third of three attempts failed: nothing follows
    assert policy.next_delay(3) is None and policy.exhausted(3)
    assert time.monotonic() - t < 0.05


def test_a_wait_that_would_reach_the_deadline_is_not_taken():
    policy = RetryPolicy(None, backoff_s=1.0, max_backoff_s=1.0, jitter=0.0)
    t = time.monotonic()
    assert policy.wait_sync(1, deadline=t + 0.5) is False
    assert time.monotonic() - t < 0.05
    assert policy.next_delay(1, deadline=t + 5) == 1.0


def test_backoff_doubles_up_to_its_cap_and_jitter_stays_within_its_share():
    exact = RetryPolicy(None, backoff_s=0.1, max_backoff_s=1.0, jitter=0.0)
    assert [exact.delay(n) for n in range(1, 7)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert exact.delay(10_000) == 1.0  # no overflow for a loop that has failed for days
    some = RetryPolicy(None, backoff_s=1.0, max_backoff_s=1.0, jitter=0.2)
    assert all(0.8 <= some.delay(1) <= 1.0 for _ in range(200))
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(0)
    with pytest.raises(ValueError, match="jitter"):
        RetryPolicy(3, jitter=1.5)


async def test_cancel_cuts_a_wait_short():
    import asyncio

    cancel = asyncio.Event()
    policy = RetryPolicy(None, backoff_s=5.0, max_backoff_s=5.0, jitter=0.0)
    asyncio.get_running_loop().call_later(0.1, cancel.set)
    t = time.monotonic()
    assert await policy.wait(1, cancel=cancel) is False
    assert time.monotonic() - t < 1.0


@pytest.mark.parametrize("channel", [False, True], ids=["http", "channel"])
async def test_retries_of_a_stalled_call_share_one_deadline(channel):
    """Three attempts allowed, 0.3 s for the call: it ends at 0.3 s (today's main: 3 x 0.3 s plus
    waits over HTTP, 5 minutes over the channel, whose handshake had no bound of its own), and the
    stalled server is sent the request once, not three times."""
    async with stalled_server() as stalled:
        client = HttpClient(stalled.url, component="svc", retry=RetryPolicy(3, backoff_s=0.01), channel=channel)
        t = time.monotonic()
        with pytest.raises(UpstreamTimeout):
            await client.request("POST", "/v1/responses", {}, timeout_s=0.3, idempotent=True)
        took = time.monotonic() - t
        await client.close()
    assert 0.25 <= took < 0.55
    assert stalled.connections == 1


async def test_a_call_gives_up_at_the_callers_deadline():
    """A 5 s call timeout inside an episode with 0.4 s left ends at 0.4 s."""
    async with stalled_server() as stalled:
        client = HttpClient(stalled.url, component="svc", retry=RetryPolicy(3, backoff_s=0.01))
        t = time.monotonic()
        with pytest.raises(UpstreamTimeout):
            await client.request("POST", "/x", {}, timeout_s=5.0, deadline=t + 0.4, idempotent=True)
        took = time.monotonic() - t
        await client.close()
    assert 0.35 <= took < 0.8


async def test_connection_failures_are_retried_then_raised_without_a_last_wait():
    async with stalled_server() as stalled:
        dead = stalled.url  # closed when the block ends: nothing listens there any more
    waits = []
    client = HttpClient(
        dead,
        component="svc",
        retry=RetryPolicy(3, backoff_s=0.4, max_backoff_s=0.4, jitter=0.0, on_retry=lambda: waits.append(1)),
    )
    t = time.monotonic()
    with pytest.raises(UpstreamError, match="cannot connect"):
        await client.request("POST", "/tools/x", {}, timeout_s=5.0)  # not idempotent, but never sent
    took = time.monotonic() - t
    await client.close()
    assert len(waits) == 2  # two waits between three attempts, none after the last
    assert 0.75 <= took < 1.2


def key_ranked_first(replicas: ReplicaSet, url: str) -> str:
    return next(k for k in (f"sess_{i}" for i in range(1000)) if replicas.order(k)[0] == url)


@pytest.mark.parametrize("channel", [False, True], ids=["http", "channel"])
async def test_a_call_to_a_stalled_replica_fails_over_to_another(healthy_url, channel):
    """Two model replicas, the episode's own (by session hash) stalled: the call moves to the other
    one after the attempt's share of the deadline, and the stalled one gets the request once."""
    async with stalled_server() as stalled:
        model = HttpModelClient(
            [stalled.url, healthy_url],
            timeout_s=5.0,
            attempt_timeout_s=0.3,
            retry=RetryPolicy(3, backoff_s=0.01),
            channel=channel,
        )
        key = key_ranked_first(model.replicas, stalled.url)
        t = time.monotonic()
        body = await model.create({"input": "hi", "metadata": {"rollgate_session": key}})
        took = time.monotonic() - t
        # the stalled replica is now marked down: the next call of that session goes straight on
        t2 = time.monotonic()
        await model.create({"input": "again", "metadata": {"rollgate_session": key}})
        took2 = time.monotonic() - t2
        await model.aclose()
    assert body["id"] == "resp_healthy"
    assert 0.25 <= took < 1.0 and took2 < 0.25
    assert stalled.connections == 1


async def test_without_an_attempt_timeout_a_stalled_replica_gets_half_the_time_left(healthy_url):
    async with stalled_server() as stalled:
        model = HttpModelClient([stalled.url, healthy_url], timeout_s=1.0, retry=RetryPolicy(3, backoff_s=0.01))
        key = key_ranked_first(model.replicas, stalled.url)
        t = time.monotonic()
        body = await model.create({"input": "hi", "metadata": {"rollgate_session": key}})
        took = time.monotonic() - t
        await model.aclose()
    assert body["id"] == "resp_healthy" and 0.45 <= took < 0.9


async def test_every_replica_stalled_ends_at_the_deadline_with_each_asked_once():
    async with stalled_server() as a, stalled_server() as b:
        model = HttpModelClient([a.url, b.url], timeout_s=0.6, retry=RetryPolicy(5, backoff_s=0.01))
        t = time.monotonic()
        with pytest.raises(UpstreamTimeout):
            await model.create({"input": "hi"})
        took = time.monotonic() - t
        await model.aclose()
    assert 0.55 <= took < 0.9
    assert (a.connections, b.connections) == (1, 1)
