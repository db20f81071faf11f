"""Fixtures of the sandbox tests: a real local provider with small limits (fast failures)."""

from __future__ import annotations

import pytest

from rollgate.sandbox.base import SandboxLimits
from rollgate.sandbox.isolation import probe
from rollgate.sandbox.local import LocalProvider

SMALL = SandboxLimits(
    timeout_s=3.0,
    cpu_s=2,
    memory_bytes=256 * 2**20,
    max_procs=32,
    max_file_bytes=1 * 2**20,
    max_output_bytes=8 * 1024,
    max_workdir_bytes=8 * 2**20,
)

needs_isolation = pytest.mark.skipif(
    not probe().network_isolated, reason=f"host allows no namespaces for the sandbox: {probe().detail}"
)
needs_dedicated_uid = pytest.mark.skipif(
    not probe().dedicated_uid, reason="the sandbox runs as the service's uid here (not root)"
)


@pytest.fixture
def provider() -> LocalProvider:
    return LocalProvider(SMALL)


@pytest.fixture
async def sandbox(provider):
    sb = await provider.create()
    yield sb
    await sb.destroy()
