"""mini-swe-agent's Rollgate environment (`rollgate_mini_env.SessionEnvironment`), without mini:
the module is loaded from its folder as mini loads it (it needs nothing of Rollgate), and its
`execute` is pointed at a real `swe/parse` session served over HTTP on loopback, where every
command runs in the session's real sandbox. What mini itself does with it (a real `mini` run per
episode, verified) is tests/agent/test_harness_mini_swe.py, in the slow tier."""

from __future__ import annotations

import importlib.util
import shutil
import tomllib
from importlib.metadata import EntryPoint

import httpx
import pytest

from rollgate.agent_server.harness.config import MINI_ENV_CLASS, MINI_ENV_DIR, MiniSweAgentConfig
from rollgate.agent_server.plugins import GROUP, load_entry_points
from rollgate.core.serving import serve_in_thread
from rollgate.core.session_store import MemorySessionStore
from rollgate.core.settings import Settings
from rollgate.resources_servers.app import create_resources_app
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.families.swe import checkout
from rollgate.resources_servers.families.swe.env import SweEnv
from rollgate.resources_servers.families.swe.projects import PROJECTS
from rollgate.resources_servers.families.swe.sources import ensure_source
from rollgate.resources_servers.families.swe.tasks import task_row, validated
from rollgate.sandbox.isolation import INNER_WORKDIR
from tests.conftest import missing
from tests.gateway.rows import REPO

BUDGET = 6  # the session's tool calls


def load_adapter():
    module, cls = MINI_ENV_CLASS.rsplit(".", 1)
    spec = importlib.util.spec_from_file_location(module, f"{MINI_ENV_DIR}/{module}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, getattr(mod, cls)


@pytest.fixture(scope="module")
def session():
    """A seeded swe/parse session over HTTP: (its MCP URL, the client, the session id)."""
    for tool in ("bwrap", "patch"):
        if shutil.which(tool) is None:
            missing(f"the swe family needs {tool} (apt-get install bubblewrap patch)")
    project, home = PROJECTS["parse"], Settings().home
    files = checkout.pristine(ensure_source(project, home))
    row = task_row("swe/parse", project, validated(project, 1, home)[0], files, "t0")
    env = SweEnv("parse", home=home, max_tool_calls=BUDGET)
    app = create_resources_app(EnvRuntime(env, MemorySessionStore()))
    with serve_in_thread(app) as base, httpx.Client(base_url=base, timeout=120) as client:
        sid = client.post("/sessions", json=row).json()["session_id"]
        yield f"{base}/sessions/{sid}/mcp", client, sid


def test_the_shell_tools_answer_becomes_minis_output_and_exit_code():
    mod, _ = load_adapter()
    ok = {"output": "hello\n", "returncode": 0, "exception_info": ""}
    assert mod.parse("exit code 0\n--- stdout ---\nhello") == ok
    assert mod.parse("exit code 2\n--- stderr ---\nno such file") == {
        "output": "no such file\n",
        "returncode": 2,
        "exception_info": "",
    }
    assert mod.parse("exit code 1\n--- stdout ---\na\n--- stderr ---\nb")["output"] == "a\nb\n"
    assert mod.parse("exit code 0") == {"output": "", "returncode": 0, "exception_info": ""}
    killed = mod.parse("killed: wall-clock timeout after 60.0s\n--- stdout ---\npartial")
    assert killed["returncode"] == -1 and killed["output"] == "partial\n" and "timeout" in killed["exception_info"]


def test_commands_run_in_the_sessions_sandbox_and_change_its_tree(session, tmp_path):
    url, client, sid = session
    _, Env = load_adapter()
    host = tmp_path / "host-only.txt"
    host.write_text("HOST-SECRET\n")
    env = Env(mcp_url=url, env={"PAGER": "cat", "GREETING": "it's me"})
    out = env.execute({"command": f'pwd; echo "$PAGER $GREETING"; cat {host}; echo oops >&2; exit 3'})
    assert out["returncode"] == 3 and out["exception_info"] == ""
    lines = out["output"].splitlines()
    assert lines[0] == INNER_WORKDIR and lines[1] == "cat it's me"  # mini's env settings, exported
    assert "HOST-SECRET" not in out["output"] and "No such file" in out["output"] and lines[-1] == "oops"
    # a relative cwd is the checkout's folder; what a command writes is in the session's tree
    out = env.execute({"command": "pwd && echo written > note.txt"}, cwd="parse")
    assert out == {"output": f"{INNER_WORKDIR}/parse\n", "returncode": 0, "exception_info": ""}
    read = client.post(f"/sessions/{sid}/tools/read_file", json={"arguments": {"path": "parse/note.txt"}})
    assert read.json()["output"].split() == ["1", "written"]
    assert env.serialize()["info"]["config"]["environment_type"] == MINI_ENV_CLASS


def test_a_session_that_refuses_or_is_gone_stops_the_harness(session):
    url, client, sid = session
    mod, Env = load_adapter()
    env = Env(mcp_url=url)
    with pytest.raises(mod.SessionError, match="refused 'shell'.*budget"):
        for _ in range(BUDGET + 1):
            env.execute({"command": "true"})
    client.delete(f"/sessions/{sid}")
    with pytest.raises(mod.SessionError, match="answered 404"):
        env.execute({"command": "true"})
    with pytest.raises(mod.SessionError, match="cannot be reached"):
        Env(mcp_url="http://127.0.0.1:9/mcp").execute({"command": "true"})


def test_the_mini_swe_agent_kind_is_registered_and_derives_its_command_line():
    # as pyproject.toml registers it (the installed metadata may predate the entry point)
    with open(REPO / "pyproject.toml", "rb") as f:
        value = tomllib.load(f)["project"]["entry-points"][GROUP]["mini_swe_agent"]
    [spec], broken = load_entry_points([EntryPoint(name="mini_swe_agent", value=value, group=GROUP)])
    assert not broken and spec.available and spec.factory.options_model is MiniSweAgentConfig
    c = MiniSweAgentConfig.model_validate({"mini": "/opt/mini/bin/mini", "mini_config": ["mini.yaml", 'a.b={"c": 1}']})
    assert c.name == "mini-swe-agent" and c.prompt == "{issue}"
    assert c.command[:7] == ["/opt/mini/bin/mini", "-m", "openai/{model}", "-t", "{prompt}", "-y", "--exit-immediately"]
    specs = [c.command[i + 1] for i, a in enumerate(c.command) if a == "-c"]
    assert specs == [
        "mini.yaml",
        'a.b={{"c": 1}}',  # taken literally: braces escaped for the template
        "model.model_kwargs.api_base={base_url}",
        f"environment.environment_class={MINI_ENV_CLASS}",
    ]
    assert c.env["PYTHONPATH"] == MINI_ENV_DIR and c.env["MSWEA_CONFIGURED"] == "true"
    mine = MiniSweAgentConfig.model_validate({"env": {"MSWEA_COST_TRACKING": "strict", "X": "{workdir}"}})
    assert (
        mine.env["MSWEA_COST_TRACKING"] == "strict" and mine.env["X"] == "{workdir}" and "MSWEA_CONFIGURED" in mine.env
    )
    assert MiniSweAgentConfig.model_validate(mine.model_dump()) == mine  # validating again changes nothing
    on_host = MiniSweAgentConfig.model_validate({"sandbox": False})
    assert not any("environment_class" in a for a in on_host.command) and "PYTHONPATH" not in on_host.env
    with pytest.raises(ValueError, match="unknown placeholder"):
        MiniSweAgentConfig.model_validate({"prompt": "{nope}"})
