"""External environments configured by entry (`envs: [{name, kind, ...}]`): the settings accept
them (YAML and ROLLGATE_ENVS), bad entries are refused naming the entry and the field, and a
`kind: mcp` entry (the SDK's server from counter_mcp_server.py over stdio, a verifier by name)
plays a whole episode through the embedded stack like any installed environment."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason='MCP tests need the optional extra "interop" (pip install -e ".[interop]")')

from rollgate.core.errors import BadRequest, UpstreamError  # noqa: E402
from rollgate.core.rows import parse_row  # noqa: E402
from rollgate.core.schemas import Outcome, VerifyResult  # noqa: E402
from rollgate.core.settings import EnvEntry, Settings  # noqa: E402
from rollgate.resources_servers.external import spec_from_entry  # noqa: E402
from rollgate.resources_servers.registry import EnvRegistry, default_registry  # noqa: E402
from rollgate.stack.parts import local_stack  # noqa: E402
from tests.conftest import free_port  # noqa: E402
from tests.gateway.rows import example_rows  # noqa: E402

SERVER = str(Path(__file__).with_name("counter_mcp_server.py"))
ENTRY = {
    "name": "counter_cfg",
    "kind": "mcp",
    "command": [sys.executable, SERVER, "stdio"],
    "verifier": "tests.interop.test_configured_envs:score_total",
    "tool_timeout_s": 5,
}


async def score_total(env, state, request) -> VerifyResult:
    """The verifier the entry names: the server's total against the row's target."""
    total = int(await env.call_server(state, "read_total", {}))
    return VerifyResult(reward=float(total == int(state.row["target"])), metrics={"total": total})


def test_settings_take_entries_from_yaml_and_the_environment(tmp_path, monkeypatch):
    cfg = tmp_path / "rollgate.yaml"
    cfg.write_text("envs:\n  - math\n  - {name: ng, kind: nemo_gym, urls: ['http://127.0.0.1:9']}\n")
    settings = Settings.load(cfg)
    assert settings.env_names == ["math", "ng"]
    assert settings.env_entries == [EnvEntry(name="ng", kind="nemo_gym", urls=["http://127.0.0.1:9"])]
    monkeypatch.setenv("ROLLGATE_ENVS", json.dumps(["math", ENTRY]))
    from_env = Settings.load()
    assert [(e.name, e.kind) for e in from_env.env_entries] == [("counter_cfg", "mcp")]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({**ENTRY, "kind": "gym"}, "envs[1] (counter_cfg).kind: unknown environment kind 'gym'"),
        ({**ENTRY, "verifier": "nope"}, 'verifier must be "module:function"'),
        ({**ENTRY, "verifier": "tests.interop.nowhere:f"}, "envs[1] (counter_cfg).verifier: cannot load"),
        ({**ENTRY, "url": "http://127.0.0.1:9/mcp"}, "exactly one of `command`"),
        ({**ENTRY, "tool_timeout_s": -1}, "envs[1] (counter_cfg).tool_timeout_s"),
        ({**ENTRY, "colour": "red"}, "envs[1] (counter_cfg).colour"),
        ({**ENTRY, "name": "math"}, "taken by the installed environment"),
    ],
)
def test_a_bad_entry_is_refused_naming_the_entry_and_the_field(entry, says):
    with pytest.raises(BadRequest) as err:
        EnvRegistry().with_envs(["math", EnvEntry.model_validate(entry)])
    assert says in err.value.message


def test_a_name_with_glob_characters_is_refused():
    with pytest.raises(ValueError, match="environment name"):
        EnvEntry(name="ng/*", kind="mcp")


def test_configuring_the_same_name_again_replaces_the_entry_in_a_new_registry():
    installed = EnvRegistry()
    first = installed.with_envs([EnvEntry.model_validate(ENTRY)])
    other = EnvEntry.model_validate({**ENTRY, "tool_timeout_s": 9})
    second = first.with_envs([other])
    assert second.resolve([other]) == ["counter_cfg"]
    assert second.get("counter_cfg").env_class.tool_timeout_s == 9
    # the registries it came from are unchanged: configuring returns a new one
    assert first.get("counter_cfg").env_class.tool_timeout_s == 5
    assert "counter_cfg" not in installed.names(available_only=False)
    assert spec_from_entry(ENTRY).family == "mcp"


def test_resolving_changes_no_registry():
    installed = EnvRegistry()
    entry = EnvEntry.model_validate(ENTRY)
    with pytest.raises(BadRequest, match=r"envs\[0\] \(counter_cfg\): this entry is not configured"):
        installed.resolve([entry])
    assert installed.resolve(["math"]) == ["math"]
    assert "counter_cfg" not in installed.names(available_only=False)


async def test_a_configured_mcp_environment_plays_through_the_embedded_stack(tiny_model_dir):
    settings = Settings(envs=["math", ENTRY], model={"backend": "scripted", "model_path": tiny_model_dir})
    stack = local_stack(settings)
    try:
        assert set(stack.runtimes) == {"math", "counter_cfg"}
        # built from settings at the composition root: the process-wide registry never learns it
        assert "counter_cfg" not in default_registry().names(available_only=False)
        script = [{"call": {"name": "add", "arguments": {"amount": 4}}}, {"call": {"name": "seed_session"}}]
        script.append({"text": "done"})
        row = {
            "responses_create_params": {"input": "count to 4", "metadata": {"rollgate_script": json.dumps(script)}},
            "env": "counter_cfg",
            "target": 4,
        }
        traj = await stack.agent.run(parse_row(row, known_envs=stack.agent.envs))
        assert traj.outcome is Outcome.completed, traj.error
        assert traj.reward == 1.0 and traj.metrics["total"] == 4
        outputs = [m["output"] for m in traj.messages if m.get("type") == "function_call_output"]
        # the model can call only the server's tools: a call to an invented lifecycle name is not
        # a declared tool, so the model server returns it as text and the episode ends on it
        assert outputs == ["total=4"] and "seed_session" in traj.messages[-1]["content"][0]["text"]
    finally:
        await stack.aclose()  # closes the environment's MCP connections too


def test_a_stdio_server_started_from_elsewhere_names_its_stderr_and_the_cwd_option(tmp_path):
    """`python -m server` from another directory exits at once: the error quotes the server's own
    words and names the `cwd` / `env` options; with `cwd` set the same entry builds."""
    (tmp_path / "rg_counter_srv.py").write_text(Path(SERVER).read_text())
    entry = {**ENTRY, "name": "counter_elsewhere", "command": [sys.executable, "-m", "rg_counter_srv", "stdio"]}
    with pytest.raises(UpstreamError) as err:
        spec_from_entry(entry).build()
    message = err.value.message
    assert "did not list its tools" in message and "No module named rg_counter_srv" in message
    assert "`cwd`" in message and "`env`" in message and "PYTHONPATH" in message
    env = spec_from_entry({**entry, "cwd": str(tmp_path)}).build()
    assert {t["name"] for t in env.tool_schemas()} >= {"add", "read_total"}


async def test_an_environment_that_failed_to_start_ends_its_rows_naming_the_cause(tiny_model_dir):
    """An OpenEnv server that is down at start-up: the other environments run, and each row of the
    broken one is a failure record saying it failed to start and why (not "unknown environment")."""
    url = f"http://127.0.0.1:{free_port()}"
    down = {"name": "oe_down", "kind": "openenv", "url": url, "connect_timeout_s": 2}
    settings = Settings(envs=["math", down], model={"backend": "scripted", "model_path": tiny_model_dir})
    stack = local_stack(settings)
    try:
        assert set(stack.runtimes) == {"math", "oe_down"}
        row = {"responses_create_params": {"input": "play"}, "env": "oe_down"}
        traj = await stack.agent.run(parse_row(row, known_envs=stack.agent.envs))
        assert traj.outcome is Outcome.env_error and traj.reward is None
        assert "environment 'oe_down' failed to start" in traj.error.message
        assert f"OpenEnv server {url} cannot be reached" in traj.error.message
        ok = await stack.agent.run(parse_row(example_rows("math", 1)[0], known_envs=stack.agent.envs))
        assert ok.outcome is Outcome.completed, ok.error
    finally:
        await stack.aclose()


def test_a_resources_service_serves_the_rest_when_one_environment_fails_to_start():
    """A service of several environments (role resources, `--env math,oe_down`): the broken one's
    seed is a 502 naming why it failed to start; the others serve; all broken is a start-up error."""
    import httpx

    from rollgate.core.serving import serve_in_thread
    from rollgate.resources_servers.server import build_app

    url = f"http://127.0.0.1:{free_port()}"
    down = {"name": "oe_down", "kind": "openenv", "url": url, "connect_timeout_s": 2}
    settings = Settings(envs=["math", down])
    app = build_app(settings, "math,oe_down")
    with serve_in_thread(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        resp = client.post("/envs/oe_down/sessions", json={"responses_create_params": {"input": "play"}})
        assert resp.status_code == 502
        message = resp.json()["error"]["message"]
        assert "environment 'oe_down' failed to start" in message and f"OpenEnv server {url}" in message
        row = example_rows("math", 1)[0]
        assert client.post("/envs/math/sessions", json=row).status_code in (200, 201)
    with pytest.raises(RuntimeError, match="none of the environments"):
        build_app(Settings(envs=[down, {**down, "name": "oe_down2"}]), "oe_down,oe_down2")
