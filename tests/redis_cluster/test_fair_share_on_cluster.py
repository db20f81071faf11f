"""Fair share between concurrent jobs on a Redis Cluster: the same suite as on one server
(tests/gateway/test_fair_share.py), claiming by the cluster's rounds (rollgate.jobs.redis_claim)."""

from __future__ import annotations

from tests.gateway.test_fair_share import *  # noqa: F403 - the suite, collected here again
from tests.redis_cluster.test_contracts_on_cluster import make_queue  # noqa: F401 - the cluster's queues
