"""Environment plugins: a separate distribution registers environments through the entry point
group `rollgate.environments`, with no change to Rollgate.

The plugin is a real installed distribution: a package plus a `*.dist-info` (METADATA and
entry_points.txt) in a temporary folder on the PYTHONPATH of a `rollgate` subprocess, which is what
`pip install` leaves in site-packages. Its module is the one-module example of
docs/environments.md, read from the docs, so the documented example is the tested one."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rollgate.core.errors import NotFound
from rollgate.resources_servers.registry import EnvRegistry

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "environments.md"
ROLLGATE = [sys.executable, "-m", "rollgate.cli"]


def documented_module() -> str:
    text = DOCS.read_text()
    section = text[text.index("## Write an environment in one module") :]
    return re.search(r"```python\n(# guess_env\.py\n.*?)```", section, re.DOTALL).group(1)


EXTRA = '''

class NotAnEnvironment:
    """Named by an entry point by mistake."""


def two_games():
    """A factory returning several environments."""

    class Louder(GuessEnv):
        name = "guess_loud"

    return [Louder]
'''

ENTRY_POINTS = """[rollgate.environments]
guess = guess_env:GuessEnv
guess_family = guess_env:two_games
not_an_env = guess_env:NotAnEnvironment
missing_module = no_such_module_xyz:Env
math = guess_env:GuessEnv
"""


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    (site / "guess_env.py").write_text(documented_module() + EXTRA)
    dist = site / "guess_env-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: guess-env\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    return site


def rollgate(args: list[str], site: Path, tmp: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
        "ROLLGATE_HOME": str(tmp),
        **env,
    }
    return subprocess.run([*ROLLGATE, *args], env=environ, capture_output=True, text=True, timeout=300, cwd=tmp)


def test_a_plugin_shows_up_in_rollgate_envs_and_broken_ones_are_reported(plugin_path, tmp_path):
    proc = rollgate(["envs", "--json"], plugin_path, tmp_path)
    assert proc.returncode == 0, proc.stderr
    listed = {e["name"]: e for e in json.loads(proc.stdout)}
    assert listed["guess"]["available"] and listed["guess"]["tools"] == ["guess"]
    assert listed["guess"]["generates_tasks"]
    assert listed["guess_loud"]["family"] == "guess_family"
    # what is broken is listed with its error; everything else still loads
    assert (
        "not an Environment" in listed["not_an_env"]["why_not"]
        or "expected an Environment" in (listed["not_an_env"]["why_not"])
    )
    assert "no_such_module_xyz" in listed["missing_module"]["why_not"]
    # a plugin cannot take a shipped name: Rollgate's `math` stays, the plugin's is reported
    (shipped, taken) = sorted(
        (e for e in json.loads(proc.stdout) if e["name"] == "math"), key=lambda e: e["available"]
    )[::-1]
    assert shipped["available"] and shipped["source"].endswith("MathEnv")
    assert not taken["available"] and "is taken by" in taken["why_not"] and taken["distribution"] == "guess-env"
    assert listed["reasoning_gym/chain_sum"]["available"]


def test_a_plugin_generates_tasks_and_collects_rollouts_without_changing_rollgate(plugin_path, tmp_path):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    made = rollgate(["tasks", "guess", "--n", "3", "--seed", "1", "--out", str(tasks)], plugin_path, tmp_path)
    assert made.returncode == 0, made.stderr
    assert len(tasks.read_text().splitlines()) == 3
    proc = rollgate(
        ["collect", "--tasks", str(tasks), "--out", str(out), "--no-progress"],
        plugin_path,
        tmp_path,
        ROLLGATE_ENVS='["guess"]',
        ROLLGATE_MODEL__BACKEND="scripted",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 3
    for r in records:
        assert r["task"]["env"] == "guess" and r["outcome"] == "completed", r.get("error")
        assert r["reward"] in (0.0, 1.0) and r["metrics"]["guesses"] >= 1  # the scripted model called `guess`


def test_an_entry_point_naming_a_non_environment_is_an_error_naming_it():
    from importlib.metadata import EntryPoint

    ep = EntryPoint(name="bad", value="collections:OrderedDict", group="rollgate.environments")
    registry = EnvRegistry(entry_points=[ep])
    assert registry.names() == []
    (broken,) = registry.broken
    assert broken.entry_point == "bad = collections:OrderedDict"
    assert "expected an Environment subclass" in broken.error
    with pytest.raises(NotFound) as err:
        registry.load("bad")
    assert err.value.field == "env"
