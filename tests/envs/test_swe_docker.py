"""The swe family on the docker sandbox provider (`pytest -m docker`, not in the default run): one
image (scripts/docker-swe-image.sh: a Python base plus pytest and `patch`, no project, no task),
a container per sandbox with no network and a read-only root. The real `parse` project and its
validated tasks, as in test_swe_env.py: the oracle scores 1.0, a no-op 0, an edited test 0; the
targets are not in the container; the warm pool hands out fresh containers and removes its idle
ones on close; the setting `swe.provider: docker` reaches the family."""

from __future__ import annotations

import json
import os
import sys

import pytest

from rollgate.core.session_store import MemorySessionStore
from rollgate.core.settings import Settings
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.families.swe import checkout
from rollgate.resources_servers.families.swe.env import SweEnv
from rollgate.resources_servers.server import make_runtime
from tests.deploy.dockerenv import BASE_TAG, Engine, run
from tests.deploy.manifests import ROOT
from tests.envs import test_swe_env
from tests.envs.test_swe_env import FAST, _registry, gold_calls, play

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

SWE_TAG = "rollgate-swe:dockertier"
swe_home = test_swe_env.swe_home
parse_rows = test_swe_env.parse_rows


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> str:
    engine = Engine(tmp_path_factory.mktemp("dockerd") / "dockerd.log")
    try:
        # Docker Hub may be out of reach: the local base of the docker tier (built once, cached)
        if run(["docker", "image", "inspect", BASE_TAG], check=False).returncode != 0:
            run(["bash", str(ROOT / "scripts" / "docker-test-base.sh"), BASE_TAG], timeout=1800)
        script = str(ROOT / "scripts" / "docker-swe-image.sh")
        run(["bash", script, BASE_TAG, SWE_TAG], timeout=900, env={**os.environ, "PYTHON": sys.executable})
        yield SWE_TAG
    finally:
        engine.stop()  # only if this module started it


@pytest.fixture
async def denv(image, swe_home):
    env = SweEnv(FAST, home=swe_home, sandbox="docker", sandbox_options={"image": image}, warm_pool=1)
    yield env
    await env.aclose()


def _containers(ids: list[str]) -> list[str]:
    out = run(["docker", "ps", "-a", "--format", "{{.Names}}"]).stdout.split()
    return [n for n in out if n in ids]


async def test_oracle_scores_one_a_no_op_and_an_edited_test_zero_in_containers(denv, parse_rows):
    assert denv.sandboxes.name == "docker" and denv.runner is None and denv.workdir == "/work"
    rt = EnvRuntime(denv, MemorySessionStore())
    for row in parse_rows:
        gold, outs = await play(rt, row, gold_calls(row))
        assert not outs[0].is_error and gold.reward == 1.0 and gold.metrics["resolved"], (outs[0].output, gold)
    row = parse_rows[0]
    noop, _ = await play(rt, row)
    assert noop.reward == 0.0 and noop.metrics["targets_fixed"] == 0
    path = checkout.split_node_id(row["target_tests"][0])[0]
    edit = ("shell", {"command": f"echo 'def test_stub():\n    pass' >> {path}"})
    cheat, _ = await play(rt, row, [*gold_calls(row), edit])
    assert cheat.reward == 0.0 and path in cheat.metrics["error"]
    assert denv.pool.hits >= 1


async def test_the_container_hides_the_targets_and_has_no_network(denv, parse_rows):
    rt = EnvRuntime(denv, MemorySessionStore())
    row = parse_rows[0]
    sid = (await rt.seed(row)).session_id
    for target in row["target_tests"]:
        name = checkout.split_node_id(target)[1][-1]
        grep = await rt.call_tool(sid, "shell", {"command": f"grep -rn 'def {name}(' . ; echo status=$?"})
        assert "status=1" in grep.output, grep.output
    out = await rt.call_tool(sid, "run_tests", {"selector": ""})
    assert out.output.startswith("exit code 0"), out.output
    probe = "import socket; socket.create_connection(('127.0.0.1', 6379), 2)"
    net = await rt.call_tool(sid, "shell", {"command": f'python3 -c "{probe}"'})
    assert not net.output.startswith("exit code 0"), net.output
    ro = await rt.call_tool(sid, "shell", {"command": "touch /etc/x"})
    assert not ro.output.startswith("exit code 0"), ro.output
    for name, args, needle in [
        ("read_file", {"path": "../../etc/passwd"}, "outside the repository"),
        ("run_tests", {"selector": "tests/no_such_test.py"}, "matches no test"),
        ("apply_patch", {"patch": "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"}, "does not apply"),
    ]:
        r = await rt.call_tool(sid, name, args)
        assert r.is_error and needle in r.output, (name, r.output)
    await rt.close(sid)


async def test_pooled_containers_are_fresh_and_removed_on_close(denv, parse_rows):
    rt = EnvRuntime(denv, MemorySessionStore())
    row = parse_rows[0]
    await denv.pool.wait_full(timeout_s=120)
    first = await rt.seed(row)
    await rt.call_tool(first.session_id, "shell", {"command": "echo secret > leak.txt && rm -r tests"})
    first_id = denv._box(denv.State.model_validate(await rt.state(first.session_id))).id
    await rt.close(first.session_id)
    assert _containers([first_id]) == []  # the session's container went with it
    await denv.pool.wait_full(timeout_s=120)
    second = await rt.seed(row)
    listing = (await rt.call_tool(second.session_id, "list_files", {})).output.splitlines()
    assert "leak.txt" not in listing and any(p.startswith("tests/") for p in listing)
    assert denv.pool.hits == 2
    await rt.close(second.session_id)
    await denv.pool.wait_full(timeout_s=120)
    idle = [b.id for b in denv.pool._idle]
    assert _containers(idle) == idle
    await denv.aclose()
    assert _containers(idle) == []


def test_the_docker_provider_is_a_setting(image, swe_home):
    settings = Settings(swe={"provider": "docker", "options": {"image": image}, "warm_pool": 0})
    env = make_runtime(settings, f"swe/{FAST}", registry=_registry()).env
    assert env.sandboxes.name == "docker" and env.pool is None
    assert json.loads(json.dumps(env.sandboxes.capabilities()))["image"] == image
