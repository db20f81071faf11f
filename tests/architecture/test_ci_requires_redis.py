"""A test that needs Redis skips where none runs, but fails in CI (CI=true): a CI machine without
Redis must not pass by skipping the queue's tests. Runs pytest on a one-test file in a subprocess,
with the Redis URL pointing at a loopback port where nothing listens."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
PROBE = "def test_uses_redis(redis_url):\n    assert redis_url\n"


def run_probe(ci: str | None) -> subprocess.CompletedProcess:
    probe = ROOT / "tests" / f"test_probe_{os.getpid()}_{ci}.py"  # beside conftest.py, whose fixture it uses
    probe.write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["ROLLGATE_TEST_REDIS_URL"] = f"redis://127.0.0.1:{free_port()}/0"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if ci is not None:
        env["CI"] = ci
    try:
        return subprocess.run(
            [sys.executable, "-m", "pytest", str(probe), "-q", "-rs", "-p", "no:cacheprovider", "-o", "addopts="],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        probe.unlink()


@pytest.mark.parametrize("ci,code,word", [(None, 0, "1 skipped"), ("true", 1, "1 error")])
def test_a_missing_redis_skips_locally_and_fails_in_ci(ci, code, word):
    out = run_probe(ci)
    assert out.returncode == code, out.stdout + out.stderr
    assert word in out.stdout and "no Redis server at" in out.stdout
