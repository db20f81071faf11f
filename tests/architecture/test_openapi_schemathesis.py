"""Every service's OpenAPI document describes what its routes enforce.

Schemathesis (its command line, as a user runs it) fuzzes each service over real HTTP on
loopback with every check it has, response schema conformance included: the model server
(scripted backend), a resources server (`math`, sessions in Redis), the agent server (over both),
the gateway (job queue in Redis, proxying both), the sandbox service (real isolation) and the
embedded app. A run passes with 0 failures, 0 errors, and no operation that mostly rejected the
data generated from its own schema (schemathesis' `validation_mismatch` warning).

Two documented allowances, both in tests/architecture/schemathesis_hooks.py: a 400 that names a
field listed in the operation's `x-semantic-checks` (a rule JSON Schema cannot state) is not a
"schema-valid request rejected" failure; and where no worker runs the jobs, `wait=true` on a
results stream (which stays open until the job ends) is not generated.

The default tier runs a few deterministic examples per operation; `-m slow` runs many more.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "st-key"
SEED = 20260101
# The default tier: a few generated examples per operation, and the stateful phase; the slow
# tier adds the coverage phase (every boundary of every schema: thousands of cases a service).
QUICK = {"examples": 5, "phases": "examples,fuzzing,stateful"}
THOROUGH = {"examples": 30, "phases": "examples,coverage,fuzzing,stateful"}


def settings(model_dir: Path, **kw) -> Settings:
    # scripted model without a tokenizer: token-level limits (the context window) are no JSON Schema
    return Settings(model={"backend": "scripted", "model_path": str(model_dir)}, envs=["math"], api_key=API_KEY, **kw)


def schemathesis(
    url: str, name: str, out: Path, *, examples: int, phases: str, env: dict[str, str] | None = None
) -> dict:
    """Run `schemathesis run` against `url`'s document; its JSON report."""
    report = out / f"{name}.json"
    cmd = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{url}/openapi.json",
        "--checks=all",
        f"--header=Authorization: Bearer {API_KEY}",
        f"--max-examples={examples}",
        f"--phases={phases}",
        f"--seed={SEED}",
        "--generation-deterministic",  # no example database either
        "--workers=1",
        "--request-timeout=60",
        "--report=json",
        f"--report-json-path={report}",
        "--no-color",
    ]
    hooks = {"SCHEMATHESIS_HOOKS": "tests.architecture.schemathesis_hooks", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        cmd, cwd=out, env={**os.environ, **hooks, **(env or {})}, capture_output=True, text=True, timeout=900
    )
    assert report.exists(), (
        f"schemathesis wrote no report (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}"
    )
    (out / f"{name}.txt").write_text(proc.stdout + proc.stderr)  # the full account, beside the report
    doc = json.loads(report.read_text())
    doc["output"] = proc.stdout
    return doc


def check(doc: dict, name: str) -> None:
    ops, cases = doc["operations"], doc["test_cases"]
    failures = sum(f["count"] for f in doc["failures"])
    print(
        f"\n{name}: {ops['tested']} operations, {cases['generated']} cases, {failures} failures, "
        f"{len(doc['errors'])} errors, {doc.get('filtered') or 0} documented semantic 400s"
    )
    assert ops["tested"] == ops["selected"] > 0 and ops["errored"] == 0, doc["output"][-5000:]
    assert doc["failures"] == [] and doc["errors"] == [], doc["output"][-12000:]
    mismatch = doc["warnings"].get("validation_mismatch")
    assert not mismatch, f"operations that mostly rejected data made from their own schema: {mismatch}"


# --- the services -------------------------------------------------------------------------------


@contextlib.contextmanager
def model_server(model_dir: Path) -> Iterator[str]:
    from rollgate.model_server.server import build_app

    with serve_in_thread(build_app(settings(model_dir))) as url:
        yield url


@contextlib.contextmanager
def resources_server(redis_url: str) -> Iterator[str]:
    from rollgate.core.session_store import RedisSessionStore
    from rollgate.resources_servers.app import create_resources_app
    from rollgate.resources_servers.base import EnvRuntime
    from rollgate.resources_servers.registry import load_env

    prefix = f"rgtest:st:{uuid.uuid4().hex[:8]}"
    store = RedisSessionStore(redis_url, prefix=prefix)
    try:
        with serve_in_thread(create_resources_app(EnvRuntime(load_env("math"), store))) as url:
            yield url
    finally:
        _drop_keys(redis_url, prefix)


def _drop_keys(redis_url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(f"{prefix}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("no-model")  # holds no model: the scripted backend runs without one


@pytest.fixture(scope="module")
def parts(redis_url, model_dir) -> Iterator[tuple[str, str]]:
    """A model server and a math resources server, for the services that reach them."""
    with model_server(model_dir) as model, resources_server(redis_url) as env:
        yield model, env


@contextlib.contextmanager
def service(name: str, parts: tuple[str, str], redis_url: str, model_dir: Path) -> Iterator[tuple[str, dict]]:
    """(base URL, environment of the schemathesis run) of a service."""
    model, env = parts
    remote = {"model_url": model, "env_urls": {"math": [env]}}
    if name == "model":
        yield model, {}
    elif name == "resources":
        yield env, {}
    elif name == "agent":
        from rollgate.stack.agent_role import build_app

        with serve_in_thread(build_app(settings(model_dir, **remote))) as url:
            yield url, {}
    elif name == "gateway":
        from rollgate.gateway.server import build_app

        prefix = f"rgtest:st:{uuid.uuid4().hex[:8]}"
        app = build_app(settings(model_dir, redis_url=redis_url, gateway={"queue_prefix": prefix}, **remote))
        try:
            with serve_in_thread(app) as url:
                yield url, {"ROLLGATE_ST_NO_WAIT": "1"}  # no agent worker runs the fuzzer's jobs
        finally:
            _drop_keys(redis_url, prefix)
    elif name == "embedded":
        from rollgate.stack.embedded import build_app

        with serve_in_thread(build_app(settings(model_dir))) as url:
            # its worker runs the fuzzer's jobs, but one may hold 1024 samples a row: never wait for it
            yield url, {"ROLLGATE_ST_NO_WAIT": "1"}
    elif name == "sandbox":
        from rollgate.sandbox.base import SandboxLimits
        from rollgate.sandbox.isolation import probe
        from rollgate.sandbox.local import LocalProvider
        from rollgate.sandbox.service import create_sandbox_app

        if not probe().network_isolated:
            pytest.skip(f"host allows no namespaces for the sandbox: {probe().detail}")
        limits = SandboxLimits(timeout_s=3.0, cpu_s=2, memory_bytes=256 * 2**20, max_procs=16, max_output_bytes=8192)
        app = create_sandbox_app(LocalProvider(limits), token=API_KEY, max_sandboxes=4096, idle_ttl_s=120)
        with serve_in_thread(app) as url:
            yield url, {}
    else:
        raise ValueError(name)


SERVICES = ["model", "resources", "agent", "gateway", "sandbox", "embedded"]


@pytest.mark.parametrize("name", SERVICES)
def test_schemathesis_finds_no_failure(name, parts, redis_url, model_dir, tmp_path):
    with service(name, parts, redis_url, model_dir) as (url, env):
        check(schemathesis(url, name, tmp_path, env=env, **QUICK), name)


@pytest.mark.slow
@pytest.mark.parametrize("name", SERVICES)
def test_schemathesis_finds_no_failure_in_a_long_run(name, parts, redis_url, model_dir, tmp_path):
    with service(name, parts, redis_url, model_dir) as (url, env):
        check(schemathesis(url, name, tmp_path, env=env, **THOROUGH), name)
