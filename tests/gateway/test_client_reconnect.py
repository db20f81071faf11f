"""RolloutClient.results() reconnects on the shared schedule (rollgate.core.retry): a gateway that
is gone costs `max_reconnects` waits, none after the last attempt. Real loopback port, nothing
listening."""

from __future__ import annotations

import time

import pytest

from rollgate.client.gateway import RolloutClient
from rollgate.core.errors import UpstreamError
from tests.conftest import free_port


def test_a_gone_gateway_ends_the_results_stream_after_max_reconnects_without_a_last_wait():
    client = RolloutClient(f"http://127.0.0.1:{free_port()}", max_reconnects=2)
    t = time.monotonic()
    with pytest.raises(UpstreamError, match="lost the results stream of job_x 3 times"):
        list(client.results("job_x"))
    took = time.monotonic() - t
    client.close()
    # two waits: 0.2-0.4 s and 0.4-0.8 s (0.4 s doubling, half of each random); none after the third
    assert 0.6 <= took < 1.6
