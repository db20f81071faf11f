"""The sandbox service (`rollgate serve --role sandbox`) and the remote provider, over real HTTP on
loopback with the real local provider behind it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

import rollgate
from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings
from rollgate.resources_servers.envs.code import CodeEnv
from rollgate.sandbox import SandboxError
from rollgate.sandbox.isolation import probe
from rollgate.sandbox.local import LocalProvider
from rollgate.sandbox.remote import RemoteProvider
from rollgate.sandbox.service import build_app, create_sandbox_app
from tests.sandbox import cases
from tests.sandbox.conftest import SMALL, needs_dedicated_uid, needs_isolation

TOKEN = "sandbox-test-token"


@pytest.fixture
def service():
    app = create_sandbox_app(LocalProvider(SMALL), token=TOKEN, max_sandboxes=4, idle_ttl_s=60)
    with serve_in_thread(app) as url:
        yield url, app


@pytest.fixture
async def remote(service):
    provider = RemoteProvider(service[0], TOKEN)
    yield provider
    await provider.close()


async def test_exec_files_and_destroy_round_trip(remote):
    sb = await remote.create()
    await sb.write_file("data/in.txt", b"\x00\x01binary")
    r = await sb.exec(
        code="import sys\nprint(open('data/in.txt','rb').read()[2:].decode(), sys.stdin.read())", stdin="hi"
    )
    assert r.ok and r.stdout == "binary hi\n", r
    assert await sb.read_file("data/in.txt") == b"\x00\x01binary"
    slow = await sb.exec(code="while True: pass", timeout_s=1.0)
    assert slow.timed_out and slow.killed_by == "timeout"
    await sb.destroy()
    with pytest.raises(SandboxError, match="destroyed"):
        await sb.exec(code="print(1)")


async def test_bad_input_is_a_clear_error_naming_the_field(remote):
    sb = await remote.create()
    with pytest.raises(SandboxError, match="path"):
        await sb.read_file("../../etc/passwd")
    await sb.destroy()
    gone = await remote.create()
    await gone.destroy()
    gone._destroyed = False  # the service no longer knows it
    with pytest.raises(SandboxError, match="404.*no sandbox"):
        await gone.exec(code="print(1)")


def test_a_body_nested_too_deep_is_a_400_naming_the_field(service):
    # exec's body is parsed by FastAPI into a model; a deep extra field was ignored, a deeper one a bare 400
    url, _ = service
    auth = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    for depth, field in [(300, "extra[0][0][0]"), (5000, "body")]:
        body = '{"code": "print(1)", "extra": ' + "[" * depth + "]" * depth + "}"
        r = httpx.post(url + "/v1/sandboxes/any/exec", content=body, headers=auth, timeout=10)
        assert r.status_code == 400 and r.json()["error"]["field"] == field, r.text


def test_every_route_but_health_needs_the_token(service):
    url, _ = service
    assert httpx.get(url + "/healthz", timeout=5).status_code == 200
    assert httpx.post(url + "/v1/sandboxes", timeout=5).status_code == 401
    wrong = httpx.post(url + "/v1/sandboxes", headers={"authorization": "Bearer nope"}, timeout=5)
    assert wrong.status_code == 401 and wrong.json()["error"]["field"] == "authorization"


async def test_open_sandboxes_are_capped_and_idle_ones_reaped(service, remote):
    url, app = service
    held = [await remote.create() for _ in range(4)]
    with pytest.raises(SandboxError, match="503"):
        await remote.create()
    table = app.state.sandboxes
    table.idle_ttl_s = 0.0
    await asyncio.sleep(0.01)
    assert await table.reap() == 4  # what the background reaper does every idle_ttl_s / 4
    for sb in held:
        await sb.destroy()  # already gone: a 404 is fine
    assert (await remote.create()).id


@needs_isolation
async def test_network_cases_hold_through_the_service(remote):
    await cases.no_network_even_to_loopback(remote)


@needs_dedicated_uid
async def test_filesystem_cases_hold_through_the_service(remote):
    await cases.sessions_cannot_read_each_other(remote)
    await cases.service_secrets_stay_hidden(remote, TOKEN, [])
    if probe().private_root:
        await cases.escapes_are_refused(remote, [str(Path(rollgate.__file__).parent)])


async def test_code_env_runs_its_tests_in_the_remote_sandbox(service):
    env = CodeEnv("remote", url=service[0], token=TOKEN)
    from rollgate.resources_servers.envs.code import CodeState

    state = CodeState(function_name="add", visible=[("add(1, 2)", "3")], hidden={"g": [("add(2, 2)", "4")]})
    out = await env.run_tests(state, code="def add(a, b):\n    return a + b\n")
    assert "1/1 visible tests passed" in out


def test_role_sandbox_needs_a_token():
    with pytest.raises(SystemExit, match="ROLLGATE_SANDBOX__TOKEN"):
        build_app(Settings())
