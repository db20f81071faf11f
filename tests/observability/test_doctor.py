"""`rollgate doctor` against real parts: real Redis, real servers on loopback, a wrong Redis URL."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest
import yaml

from rollgate.commands.checks import Status, check_model_dir, check_redis
from rollgate.commands.doctor import exit_code, run_checks
from rollgate.core.app import make_app
from rollgate.core.auth import require_bearer
from rollgate.core.serving import serve_in_thread
from rollgate.core.session_store import MemorySessionStore
from rollgate.core.settings import ModelSettings, Settings
from rollgate.resources_servers.app import create_resources_app
from rollgate.resources_servers.base import EnvRuntime
from tests.conftest import free_port
from tests.procs import rollgate_cmd
from tests.resources.toy_env import CounterEnv


def by_name(results) -> dict:
    return {r.name: r for r in results}


def settings_for(tmp_path, **kw) -> Settings:
    # envs=[]: only what the test configures is checked; scripted model: no model server involved
    return Settings(**{"home": str(tmp_path), "envs": [], "model": ModelSettings(backend="scripted"), **kw})


@pytest.fixture(scope="module")
def counter_env_url():
    app = create_resources_app(EnvRuntime(CounterEnv(), MemorySessionStore()))
    with serve_in_thread(app) as url:
        yield url


async def test_doctor_is_green_against_real_redis_and_a_real_resources_server(tmp_path, redis_url, counter_env_url):
    results = by_name(
        await run_checks(
            settings_for(tmp_path, redis_url=redis_url, api_key="k", env_urls={"counter": [counter_env_url]})
        )
    )
    # The development Redis may run without an append-only file: that is a warning, not a failure
    # (tests/gateway/test_lost_state.py checks both cases against Redis servers of its own).
    assert results["redis"].status in (Status.ok, Status.warn) and "answered PING" in results["redis"].detail
    assert results["env:counter"].status is Status.ok
    assert results["env:counter"].detail.endswith("3 tool(s)")  # add, reset, slow_read
    assert results["config"].status is Status.ok
    assert results["tiny-model"].status is Status.warn  # none built under this empty home
    assert results["sandbox"].status in (Status.ok, Status.warn)
    assert exit_code(list(results.values())) == 0


def test_doctor_command_fails_on_a_wrong_redis_url_and_says_how_to_fix_it(tmp_path):
    config = tmp_path / "rollgate.yaml"
    config.write_text(
        yaml.safe_dump({"home": str(tmp_path), "envs": [], "model": {"backend": "scripted"}, "api_key": "k"})
    )
    wrong = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    started = time.monotonic()
    done = subprocess.run(
        rollgate_cmd("doctor", "--config", str(config), "--redis-url", wrong),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    redis_line = next(i for i, line in enumerate(lines) if line.split()[1:2] == ["redis"])
    assert lines[redis_line].startswith("FAIL") and wrong in lines[redis_line]
    assert "fix: start Redis" in lines[redis_line + 1]
    assert any(line.startswith("OK    config") for line in lines)
    assert "1 failed" in done.stdout
    assert time.monotonic() - started < 60


def test_doctor_command_json_output_is_machine_readable(tmp_path, redis_url):
    import json

    config = tmp_path / "rollgate.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "home": str(tmp_path),
                "envs": [],
                "model": {"backend": "scripted"},
                "redis_url": redis_url,
                "api_key": "k",
            }
        )
    )
    done = subprocess.run(
        # a generous per-check limit: this test is about the output, not about a loaded machine's speed
        rollgate_cmd("doctor", "--config", str(config), "--json", "--timeout", "30"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = {r["name"]: r for r in json.loads(done.stdout)}
    assert results["redis"]["status"] in ("OK", "WARN")  # WARN: the development Redis keeps no AOF
    assert set(results) >= {"config", "redis", "model", "tiny-model", "sandbox"}


async def test_a_redis_password_never_appears_in_the_report():
    result = await check_redis(f"redis://:hunter2@127.0.0.1:{free_port()}/0", 2.0)
    assert result.status is Status.fail
    assert "hunter2" not in result.detail and ":***@" in result.detail


async def test_an_env_url_that_is_not_a_resources_server_fails_with_a_hint(tmp_path):
    with serve_in_thread(make_app("not an env", component="other")) as url:  # /healthz only
        results = by_name(await run_checks(settings_for(tmp_path, env_urls={"math": [url]})))
    env = results["env:math"]
    assert env.status is Status.fail and "/tools answered 404" in env.detail
    assert "may not be a Rollgate env:math" in env.fix


async def test_an_unreachable_and_a_hanging_env_fail_within_the_time_limit(tmp_path):
    with socket.socket() as hang:  # accepts connections (backlog) but never answers
        hang.bind(("127.0.0.1", 0))
        hang.listen(8)
        hanging = f"http://127.0.0.1:{hang.getsockname()[1]}"
        dead = f"http://127.0.0.1:{free_port()}"
        started = time.monotonic()
        results = await run_checks(settings_for(tmp_path, env_urls={"math": [dead, hanging]}), timeout_s=0.5)
    envs = [r for r in results if r.name == "env:math"]
    assert [r.status for r in envs] == [Status.fail, Status.fail]
    assert "cannot reach" in envs[0].detail and "rollgate serve --role resources --env math" in envs[0].fix
    assert "Timeout" in envs[1].detail or "no answer" in envs[1].detail
    assert time.monotonic() - started < 5
    assert exit_code(results) == 1


async def test_gateway_check_names_a_wrong_api_key(tmp_path):
    app = make_app("gateway", component="gateway")
    require_bearer(app, "right-key", component="gateway")

    @app.get("/v1/rollouts")
    async def jobs():
        return {"jobs": []}

    with serve_in_thread(app) as url:
        wrong = by_name(await run_checks(settings_for(tmp_path, api_key="wrong-key"), gateway_url=url))
        right = by_name(await run_checks(settings_for(tmp_path, api_key="right-key"), gateway_url=url))
    assert wrong["gateway"].status is Status.fail and "401" in wrong["gateway"].detail
    assert "ROLLGATE_API_KEY" in wrong["gateway"].fix
    assert right["gateway"].status is Status.ok and "auth accepted" in right["gateway"].detail


async def test_unknown_in_process_environment_fails_naming_the_known_ones(tmp_path):
    results = by_name(
        await run_checks(Settings(home=str(tmp_path), envs=["nope"], model=ModelSettings(backend="scripted")))
    )
    assert results["env:nope"].status is Status.fail and "math" in results["env:nope"].fix


def test_a_missing_configured_model_fails_but_the_default_tiny_model_only_warns(tmp_path):
    missing = check_model_dir("model", tmp_path / "no-such-model", missing_is_fail=True)
    assert missing.status is Status.fail and "no model directory" in missing.detail
    tiny = check_model_dir("tiny-model", tmp_path / "tiny-model", missing_is_fail=False)
    assert tiny.status is Status.warn and f"rollgate model tiny --out {tmp_path / 'tiny-model'}" in tiny.fix


def test_a_damaged_model_directory_fails_naming_the_file(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "qwen2"}')
    (tmp_path / "tokenizer.json").write_text("{not json")
    result = check_model_dir("model", tmp_path, missing_is_fail=True)
    assert result.status is Status.fail and "tokenizer.json" in result.detail
    (tmp_path / "config.json").write_text("{")
    assert "config.json" in check_model_dir("model", tmp_path, missing_is_fail=True).detail


async def test_model_check_against_a_real_model_server(tmp_path):
    from rollgate.model_server.server import build_app

    served = Settings(model=ModelSettings(backend="scripted", model_path=str(tmp_path / "none")))
    with serve_in_thread(build_app(served)) as url:
        good = by_name(await run_checks(settings_for(tmp_path, model_url=url, api_key="k")))
        other = by_name(
            await run_checks(
                settings_for(
                    tmp_path, model_url=url, api_key="k", model=ModelSettings(backend="scripted", served_name="other")
                )
            )
        )
    assert good["model"].status is Status.ok and served.model.served_name in good["model"].detail
    assert other["model"].status is Status.warn and "served_name" in other["model"].fix


async def test_an_unreachable_env_url_with_a_password_is_reported_redacted(tmp_path):
    dead = f"http://probe:hunter2@127.0.0.1:{free_port()}"  # nothing listens there
    results = by_name(await run_checks(settings_for(tmp_path, env_urls={"math": [dead]}), timeout_s=2.0))
    env = results["env:math"]
    assert env.status is Status.fail and "cannot reach" in env.detail
    assert "hunter2" not in env.detail and ":***@" in env.detail
