"""Validation drops flaky tests: a target that passes once on the buggy tree, or a test that fails
once on the pristine tree, must never decide a reward (the audit found a clock-dependent cachetools
target that paid a no-op). A small project built here (a local sdist: nothing of it exists on the
package index) has a steady test, a test that fails only the first time a given buggy source runs,
and a test that fails every other run whatever the source; validation runs in the real bubblewrap
sandbox with the real pytest runner."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from rollgate.core.settings import Settings
from rollgate.resources_servers.families.swe.pool import (
    CONFIRM_RUNS,
    confirmed,
    pool_path,
    steady,
)
from rollgate.resources_servers.families.swe.tasks import builder
from rollgate.resources_servers.families.swe.testrun import SuiteRun
from tests.envs.test_swe_env import _needs_tools
from tests.envs.test_swe_parts import _sdist

SOURCE = b"""def double(x):
    return x * 2


def half(x):
    return x // 2
"""

# A test that fails the first time it sees a given source of the module (a bug that shows only
# under load, say) and passes on every later run of the same source.
TESTS = b"""import hashlib
import pathlib

import demo


def _first(tag):
    src = pathlib.Path(demo.__file__).read_bytes()
    mark = pathlib.Path(".seen-" + tag + "-" + hashlib.sha256(src).hexdigest()[:16])
    first = not mark.exists()
    mark.touch()
    return first


def test_double_steady():
    assert demo.double(2) == 4


def test_double_flaky():
    assert demo.double(3) == 6 or not _first("double")


def test_half_flaky():
    assert demo.half(8) == 4 or not _first("half")


def test_clock():
    runs = pathlib.Path(".clock")
    n = int(runs.read_text()) if runs.exists() else 0
    runs.write_text(str(n + 1))
    assert n % 2 == 1
"""


def test_flaky_runs_are_told_apart_from_steady_ones():
    def run(**outcomes: str) -> SuiteRun:
        return SuiteRun(1, {f"t::{k}": v for k, v in outcomes.items()})

    assert steady([run(a="PASSED", b="PASSED"), run(a="PASSED", b="FAILED")]) == {"t::a"}
    assert steady([]) == set()
    reruns = [run(a="FAILED", b="FAILED", c="FAILED"), run(a="ERROR", b="PASSED")]
    assert confirmed(["t::a", "t::b", "t::c"], reruns) == ["t::a"]  # c did not run the second time
    assert confirmed(["t::b", "t::a"], reruns[:1] * CONFIRM_RUNS) == ["t::b", "t::a"]  # order kept


@pytest.fixture
def home():
    """A Rollgate home of its own, outside /tmp (every sandbox has a private /tmp, where the
    read-only runner directory would be hidden), readable by the sandbox's uid."""
    path = Path(tempfile.mkdtemp(prefix="swe-validation.", dir=Path(Settings().home).parent))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_validation_keeps_only_targets_that_fail_every_time(home):
    _needs_tools()
    project = _sdist(
        home,
        "demo-1",
        {"demo-1/demo/__init__.py": SOURCE, "demo-1/tests/__init__.py": b"", "demo-1/tests/test_demo.py": TESTS},
    )
    tasks = asyncio.run(builder(str(home), workers=1).tasks(project, 50))
    pool = json.loads(pool_path(project, str(home)).read_text())

    node = "tests/test_demo.py::"
    assert pool["flaky"] == [node + "test_clock"]  # passed in some pristine runs, not in all
    assert node + "test_clock" not in pool["baseline"] and node + "test_double_steady" in pool["baseline"]
    assert tasks, "a mutation of double() breaks its steady test"
    for task in tasks:
        # failing once with the bug is not enough: the flaky tests failed on the candidate's
        # first run and were dropped when they passed again
        assert task.targets == [node + "test_double_steady"], task
        assert task.mutation.line <= 2  # half() is covered by a flaky test only: never a task
    assert pool["scanned"] > len(tasks)
