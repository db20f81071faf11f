"""The `swe/<project>` family end to end: real sdists from the package index (fetched once into
Rollgate's cache, like the SmolLM2 fixture), real pytest runs of the real projects in the real
bubblewrap sandbox. The oracle (the reverse of the injected mutation, applied as a patch) scores
1.0, a no-op 0, an edited test 0 with the reason; the target tests are not in the model's copy;
bad input gets clear errors. The oracle over every project is in the slow tier."""

from __future__ import annotations

import shutil
import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import httpx
import pytest

from rollgate.core.errors import BadRequest, NotFound
from rollgate.core.serving import serve_in_thread
from rollgate.core.session_store import MemorySessionStore
from rollgate.core.settings import Settings
from rollgate.resources_servers.app import create_resources_app
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.families.swe import checkout
from rollgate.resources_servers.families.swe.env import SweEnv
from rollgate.resources_servers.families.swe.projects import PROJECTS, Project, get_project
from rollgate.resources_servers.families.swe.sources import SourceError, ensure_source, fetch_sdist
from rollgate.resources_servers.families.swe.tasks import task_row, validated
from rollgate.resources_servers.registry import GROUP, EnvRegistry
from tests.conftest import missing
from tests.envs.test_env_smoke import smoke

FAST = "parse"  # the quickest suite (about a second): the default tier plays it


def _needs_tools() -> None:
    for tool in ("bwrap", "patch"):
        if shutil.which(tool) is None:
            missing(f"the swe family needs {tool} (apt-get install bubblewrap patch)")


@pytest.fixture(scope="session")
def swe_home() -> str:
    _needs_tools()
    return Settings().home


@pytest.fixture(scope="session")
def parse_rows(swe_home) -> list[dict]:
    """The first two validated tasks of `parse` as rows (validated once per machine, then cached)."""
    project = PROJECTS[FAST]
    files = checkout.pristine(ensure_source(project, swe_home))
    return [task_row(f"swe/{FAST}", project, t, files, f"t{i}") for i, t in enumerate(validated(project, 2, swe_home))]


@pytest.fixture(scope="session")
def env(swe_home) -> SweEnv:
    return SweEnv(FAST, home=swe_home)


@pytest.fixture
def rt(env) -> EnvRuntime:
    return EnvRuntime(env, MemorySessionStore())


async def play(rt: EnvRuntime, row: dict, calls=()) -> tuple[object, list]:
    sid = (await rt.seed(row)).session_id
    outs = [await rt.call_tool(sid, name, args) for name, args in calls]
    result = await rt.verify(sid, {"response": "done"})
    await rt.close(sid)
    return result, outs


def gold_calls(row: dict) -> list[tuple[str, dict]]:
    return [(c["name"], c["arguments"]) for c in row["gold"]["calls"]]


async def test_oracle_scores_one_and_a_no_op_zero(rt, parse_rows):
    for row in parse_rows:
        assert row["target_tests"] and row["mutation"]["kind"]
        result, outs = await play(rt, row, gold_calls(row))
        assert not outs[0].is_error, outs[0].output
        assert result.reward == 1.0 and result.metrics["resolved"], result
        assert result.metrics["targets_fixed"] == len(row["target_tests"]) and result.metrics["regressions"] == 0
        assert sum(result.reward_components.values()) == result.reward
    noop, _ = await play(rt, parse_rows[0])
    assert noop.reward == 0.0 and noop.metrics["targets_fixed"] == 0 and not noop.metrics["resolved"]


async def test_target_tests_are_not_in_the_models_copy(rt, parse_rows):
    row = parse_rows[0]
    sid = (await rt.seed(row)).session_id
    for target in row["target_tests"]:
        path, names = checkout.split_node_id(target)
        text = (await rt.call_tool(sid, "read_file", {"path": path, "end_line": 100000})).output
        assert f"def {names[-1]}(" not in text
        grep = await rt.call_tool(sid, "shell", {"command": f"grep -rn 'def {names[-1]}(' . ; echo status=$?"})
        assert "status=1" in grep.output, grep.output
    # of Rollgate's cache the sandbox sees the test runner only: no sources, no validated tasks
    seen = (await rt.call_tool(sid, "shell", {"command": f"find {rt.env.home} -maxdepth 2"})).output
    assert f"{rt.env.home}/swe/runner" in seen and "/swe/src" not in seen and "/swe/pools" not in seen
    # the visible tests still run and pass on the buggy code (the bug shows only in the hidden ones)
    out = await rt.call_tool(sid, "run_tests", {"selector": ""})
    assert out.output.startswith("exit code 0"), out.output
    await rt.close(sid)


async def test_editing_a_test_or_the_runner_config_scores_zero_with_the_reason(rt, parse_rows):
    row = parse_rows[0]
    path = checkout.split_node_id(row["target_tests"][0])[0]
    for call in [
        ("shell", {"command": f"echo 'def test_extra():\n    pass' >> {path}"}),
        ("write_file", {"path": "conftest.py", "content": "collect_ignore = ['tests']\n"}),
        ("shell", {"command": "echo '# x' >> pyproject.toml"}),
    ]:
        result, _ = await play(rt, row, [*gold_calls(row), call])
        assert result.reward == 0.0 and result.metrics["rejected"], (call, result)
        assert "test file or the test runner's configuration" in result.metrics["error"]


async def test_tools_read_search_write_and_run_inside_the_sandbox(rt, parse_rows):
    row = parse_rows[0]
    sid = (await rt.seed(row)).session_id
    listing = (await rt.call_tool(sid, "list_files", {})).output
    assert "parse/__init__.py" in listing.splitlines()
    head = (await rt.call_tool(sid, "read_file", {"path": "parse/__init__.py", "start_line": 2, "end_line": 3})).output
    assert [line.split()[0] for line in head.splitlines()] == ["2", "3"]
    found = (await rt.call_tool(sid, "search", {"pattern": "^def parse\\("})).output
    assert "parse/__init__.py:958:def parse(" in found.splitlines()[-1]  # paths relative to the root
    assert (await rt.call_tool(sid, "search", {"pattern": "no_such_text_xyz"})).output == "no matches"
    await rt.call_tool(sid, "write_file", {"path": "notes/scratch.py", "content": "print('hi')\n"})
    ran = (
        await rt.call_tool(sid, "shell", {"command": "python3 notes/scratch.py && python3 -c 'import parse'"})
    ).output
    assert ran.startswith("exit code 0") and "hi" in ran
    net = (
        await rt.call_tool(
            sid, "shell", {"command": "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 6379), 2)\""}
        )
    ).output
    assert not net.startswith("exit code 0")
    await rt.close(sid)


async def test_only_the_projects_code_reaches_the_verifier(rt, parse_rows):
    row = parse_rows[0]
    rigged = "import sys\nsys.exit(0)\n"  # imported before pytest if it reached the verifier's path
    result, _ = await play(rt, row, [("write_file", {"path": "sitecustomize.py", "content": rigged})])
    assert result.reward == 0.0 and result.metrics["ignored_files"] == ["sitecustomize.py"]
    result, _ = await play(rt, row, [*gold_calls(row), ("write_file", {"path": "NOTES.md", "content": "x"})])
    assert result.reward == 1.0 and result.metrics["ignored_files"] == ["NOTES.md"]


async def test_bad_input_gets_clear_errors(rt, parse_rows):
    row = parse_rows[0]
    sid = (await rt.seed(row)).session_id
    cases = [
        ("read_file", {"path": "../../etc/passwd"}, "outside the repository"),
        ("read_file", {"path": "/etc/passwd"}, "outside the repository"),
        ("write_file", {"path": "../escape.py", "content": "x"}, "outside the repository"),
        ("list_files", {"path": "no_such_dir"}, "no directory"),
        ("read_file", {"path": "no_such_file.py"}, "no file"),
        ("run_tests", {"selector": "tests/no_such_test.py"}, "matches no test"),
        ("run_tests", {"selector": "tests/test_parse.py::test_no_such_name"}, "matches no test"),
        ("run_tests", {"selector": "--collect-only"}, "looks like an option"),
        ("apply_patch", {"patch": "not a diff"}, "no ---/+++ file headers"),
        (
            "apply_patch",
            {"patch": "--- a/../../x.py\n+++ b/../../x.py\n@@ -1 +1 @@\n-a\n+b\n"},
            "outside the repository",
        ),
    ]
    for name, args, needle in cases:
        out = await rt.call_tool(sid, name, args)
        assert out.is_error and needle in out.output, (name, args, out.output)
    before = (await rt.call_tool(sid, "read_file", {"path": "parse/__init__.py", "end_line": 100000})).output
    bad = "--- a/parse/__init__.py\n+++ b/parse/__init__.py\n@@ -1,2 +1,2 @@\n-no such line\n+x\n context\n"
    out = await rt.call_tool(sid, "apply_patch", {"patch": bad})
    assert out.is_error and "does not apply" in out.output
    assert (await rt.call_tool(sid, "read_file", {"path": "parse/__init__.py", "end_line": 100000})).output == before
    await rt.close(sid)

    for field, value, needle in [
        ("project", "toolz", "swe/parse"),
        ("version", "0.0.1", "serves version"),
        ("mutation", {**row["mutation"], "original": "no such text"}, "does not apply"),
        ("mutation", {**row["mutation"], "path": "tests/test_parse.py"}, "not a source file"),
        ("mutation", {"kind": "flip"}, "not a valid mutation"),
        ("target_tests", [], "non-empty list"),
        ("target_tests", ["parse/__init__.py::parse"], "not a test"),
    ]:
        with pytest.raises(BadRequest) as err:
            await rt.seed({**row, field: value})
        assert needle in err.value.message and err.value.field == field, (field, err.value)


def test_unknown_project_and_checksum_mismatch(swe_home, tmp_path):
    with pytest.raises(NotFound, match="unknown swe project 'nope'") as err:
        get_project("nope")
    assert err.value.field == "project"
    with pytest.raises(NotFound):
        SweEnv("nope", home=swe_home)
    real = PROJECTS[FAST]
    cached = fetch_sdist(real, swe_home)
    (tmp_path / "swe" / "downloads").mkdir(parents=True)
    shutil.copy(cached, tmp_path / "swe" / "downloads" / real.filename)
    wrong = Project(**{**real.__dict__, "sha256": "0" * 64})
    with pytest.raises(SourceError, match="checksum mismatch") as err:
        ensure_source(wrong, tmp_path)
    assert err.value.field == "sha256" and err.value.step == "verify"
    assert not (tmp_path / "swe" / "src").exists()


def test_seeding_never_downloads(parse_rows, tmp_path):
    fresh = Path(tmp_path, "home")
    env = SweEnv(FAST, home=str(Path(Settings().home)))  # the runner lives in the real home
    env.home = str(fresh)
    with pytest.raises(SourceError, match="not in Rollgate's cache"):
        env._trees(checkout.Mutation.model_validate(parse_rows[0]["mutation"]), parse_rows[0]["target_tests"])


def _registry() -> EnvRegistry:
    """The family as pyproject.toml registers it (the installed metadata may predate the entry point)."""
    with open(Path(__file__).parents[2] / "pyproject.toml", "rb") as f:
        eps = tomllib.load(f)["project"]["entry-points"][GROUP]
    return EnvRegistry([EntryPoint(name="swe", value=eps["swe"], group=GROUP)])


async def test_the_family_is_registered_and_passes_the_smoke_check(swe_home, parse_rows):
    registry = _registry()
    assert registry.names() == [f"swe/{name}" for name in sorted(PROJECTS)]
    spec = registry.get(f"swe/{FAST}")
    assert spec.family == "swe" and spec.available and spec.tasks is not None
    assert set(spec.tool_names()) == {
        "list_files",
        "read_file",
        "search",
        "write_file",
        "apply_patch",
        "run_tests",
        "shell",
    }
    assert await smoke(f"swe/{FAST}", spec) == {"tool": True, "reference": True}


def test_tasks_are_deterministic_for_the_seed_and_splits_never_overlap(swe_home, parse_rows):
    spec = _registry().get(f"swe/{FAST}")
    first = spec.tasks(2, 0, None, "train")
    assert first == spec.tasks(2, 0, None, "train") and len(first) == 2
    assert all(r["task_id"].startswith(f"swe/{FAST}-train-0-") and r["split"] == "train" for r in first)
    other = spec.tasks(2, 0, None, "eval")
    ids = lambda rows: {checkout.Mutation.model_validate(r["mutation"]).id for r in rows}  # noqa: E731
    assert not ids(first) & ids(other)
    for row in first:
        prompt = " ".join(m["content"] for m in row["responses_create_params"]["input"])
        # the issue names the failing tests, never the change (the patch stays with the row)
        assert row["target_tests"][0] in prompt and row["gold"]["calls"][0]["arguments"]["patch"] not in prompt
        assert "mutation" not in prompt and row["mutation"]["kind"] not in prompt
    with pytest.raises(BadRequest, match="takes no config") as err:
        spec.tasks(1, 0, {"x": 1}, "train")
    assert err.value.field == "config"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PROJECTS))
async def test_oracle_on_a_sample_of_every_project(swe_home, name):
    """Three validated tasks per project (the pool is built and cached on first use: minutes)."""
    project = PROJECTS[name]
    files = checkout.pristine(ensure_source(project, swe_home))
    rt = EnvRuntime(SweEnv(name, home=swe_home), MemorySessionStore())
    rows = [task_row(f"swe/{name}", project, t, files, f"t{i}") for i, t in enumerate(validated(project, 3, swe_home))]
    assert len(rows) == 3
    for row in rows:
        gold, _ = await play(rt, row, gold_calls(row))
        assert gold.reward == 1.0, (row["mutation"], gold)
        noop, _ = await play(rt, row)
        assert noop.reward == 0.0, (row["mutation"], noop)
        path = checkout.split_node_id(row["target_tests"][0])[0]
        edit = ("shell", {"command": f"echo 'def test_stub():\n    pass' >> {path}"})
        cheat, _ = await play(rt, row, [*gold_calls(row), edit])
        assert cheat.reward == 0.0 and path in cheat.metrics["error"]


async def test_http_routes_seed_play_verify_and_name_bad_fields(env, parse_rows):
    row = parse_rows[0]
    app = create_resources_app(EnvRuntime(env, MemorySessionStore()))
    with serve_in_thread(app) as base:
        async with httpx.AsyncClient(base_url=base, timeout=120) as c:
            assert {t["name"] for t in (await c.get("/tools")).json()} >= {"apply_patch", "run_tests", "shell"}
            sid = (await c.post("/sessions", json=row)).json()["session_id"]
            held = len(env._live)
            patch = row["gold"]["calls"][0]["arguments"]
            r = await c.post(f"/sessions/{sid}/tools/apply_patch", json={"arguments": patch})
            assert r.status_code == 200 and "patching file" in r.json()["output"]
            r = await c.post(f"/sessions/{sid}/tools/read_file", json={"arguments": {"path": "/etc/shadow"}})
            assert r.status_code == 200 and r.json()["is_error"]
            body = (await c.post(f"/sessions/{sid}/verify", json={"response": "fixed"})).json()
            assert body["reward"] == 1.0 and body["metrics"]["resolved"]
            assert (await c.delete(f"/sessions/{sid}")).status_code in (200, 204)
            assert len(env._live) == held - 1  # closing the session destroyed its sandbox
            r = await c.post("/sessions", json={**row, "version": "9.9"})
            assert r.status_code == 400 and r.json()["error"]["field"] == "version"


async def test_a_row_without_a_prompt_gets_the_issue_as_first_observation(rt, parse_rows):
    row = {**parse_rows[0], "responses_create_params": {"input": []}}
    seeded = await rt.seed(row)
    assert row["target_tests"][0] in seeded.observation and "fail" in seeded.observation
    assert row["gold"]["calls"][0]["arguments"]["patch"] not in seeded.observation
    carried = await rt.seed(parse_rows[0])
    assert carried.observation is None  # the row carries it
    for sid in (seeded.session_id, carried.session_id):
        await rt.close(sid)
