"""A model call's retries share one deadline, cut to the episode's: the agent over a real stalled
server on loopback (tests/stalled.py), with the model call allowed three attempts."""

from __future__ import annotations

import time

from rollgate.core.retry import RetryPolicy
from rollgate.core.schemas import Outcome
from rollgate.model_server.client import HttpModelClient
from tests.agent.test_agent import counter_row, make_agent, run
from tests.stalled import stalled_server


async def test_a_stalled_model_call_ends_at_model_timeout_not_three_times_it():
    async with stalled_server() as stalled:
        model = HttpModelClient(stalled.url, timeout_s=30, retry=RetryPolicy(3, backoff_s=0.01))
        agent = make_agent(model, model_timeout_s=0.4, episode_timeout_s=10)
        t = time.monotonic()
        traj = await run(agent, counter_row({"text": "7"}))
        took = time.monotonic() - t
        await model.aclose()
    assert traj.outcome is Outcome.model_error and traj.error.kind.value == "timeout"
    assert took < 0.8  # today's main: 3 x 0.4 s plus waits
    assert stalled.connections == 1  # never re-sent to the stalled server


async def test_a_model_call_never_outlives_the_episode():
    """model_timeout_s (5 s) above what is left of the episode (0.5 s): the call gives up with the
    episode, and the episode's record says it timed out, with no reward."""
    async with stalled_server() as stalled:
        model = HttpModelClient(stalled.url, timeout_s=30, retry=RetryPolicy(3, backoff_s=0.01))
        agent = make_agent(model, model_timeout_s=5, episode_timeout_s=0.5)
        t = time.monotonic()
        traj = await run(agent, counter_row({"text": "7"}))
        took = time.monotonic() - t
        await model.aclose()
    assert traj.error.kind.value == "timeout" and traj.reward is None
    assert traj.outcome in (Outcome.timeout, Outcome.model_error)
    assert took < 1.0 and stalled.connections == 1
