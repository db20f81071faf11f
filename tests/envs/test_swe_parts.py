"""The swe family's pure parts, no sandbox: mutations (every kind, text splices that keep the
file's formatting and reverse exactly), hiding target tests (functions, methods, inherited ones),
the checks on model input, the pytest report parser and the validation rule."""

from __future__ import annotations

import ast

import pytest

from rollgate.core.errors import BadRequest
from rollgate.resources_servers.base import ToolError
from rollgate.resources_servers.families.swe.checkout import hide_tests, split_node_id, visible
from rollgate.resources_servers.families.swe.mutations import KINDS, MutationError, apply, enumerate_mutations
from rollgate.resources_servers.families.swe.patches import patch_strip, repo_path, selectors
from rollgate.resources_servers.families.swe.pool import judge
from rollgate.resources_servers.families.swe.projects import PROJECTS, Project
from rollgate.resources_servers.families.swe.testrun import SuiteRun, parse_outcomes

SOURCE = '''"""Module docstring with 1 < 2 in it."""


def clamp(x: int, low: int = 0, high: int = 10) -> int:
    """Docstring: if x < low return low."""
    assert low <= high
    if x < low:  # keep this comment
        return low
    if x > high:
        return high
    return max(x, low)


def window(items, size=2):
    out = []
    for i in range(len(items) - 1):
        out.append(items[i : i + size])
    done = False
    return out if items is not None else done


if __name__ == "__main__":
    print(clamp(3, 1, 2))
'''


def test_every_kind_is_found_and_each_mutation_is_one_splice_that_reverses_exactly():
    ms = enumerate_mutations("m.py", SOURCE)
    assert {m.kind for m in ms} == set(KINDS)
    assert ms == enumerate_mutations("m.py", SOURCE)  # deterministic
    for m in ms:
        bugged = apply(SOURCE, m)
        ast.parse(bugged)
        assert bugged != SOURCE and apply(bugged, m.reverse()) == SOURCE
        assert "# keep this comment" in bugged or m.kind == "removed_branch"
        if m.kind != "removed_branch":  # a single-line splice: every other line is untouched
            assert sum(a != b for a, b in zip(SOURCE.splitlines(), bugged.splitlines(), strict=True)) == 1
    # never in docstrings, annotations, asserts or the __main__ block
    lines = {m.line for m in ms}
    assert not lines & {1, 4, 5, 6, 22, 23}
    flips = {(m.original.strip(), m.replacement.strip()) for m in ms if m.kind == "flip_comparison"}
    assert {("<", ">="), (">", "<="), ("is not", "is")} <= flips
    assert any(m.kind == "swapped_arguments" and m.replacement == "low, x" for m in ms)
    assert any(m.kind == "removed_branch" and m.original.startswith("if x < low:") for m in ms)
    assert any(m.kind == "wrong_constant" and m.original == "False" for m in ms)


def test_a_mutation_that_does_not_apply_is_a_clear_error():
    m = enumerate_mutations("m.py", SOURCE)[0]
    with pytest.raises(MutationError, match="does not apply") as err:
        apply(SOURCE.replace(m.original, "@@", 1) if m.original in SOURCE else "", m)
    assert err.value.field == "mutation"
    with pytest.raises(MutationError, match="lines"):
        apply("x = 1\n", m.model_copy(update={"line": 99}))


TESTS = """import pytest


@pytest.mark.parametrize("a", [1, 2])
def test_one(a):
    assert a


def test_two():
    assert True


class TestK:
    def test_m(self):
        assert True


class TestOnly:
    def test_alone(self):
        assert True
"""


def test_hiding_removes_functions_methods_and_their_decorators():
    out = hide_tests(TESTS, [["test_one"], ["TestK", "test_m"], ["TestOnly", "test_alone"]])
    ast.parse(out)
    assert "def test_one" not in out and "parametrize" not in out and "def test_m" not in out
    assert "def test_alone" not in out and "class TestOnly:\n    pass" in out
    assert "def test_two" in out
    assert split_node_id("t/test_x.py::TestK::test_m[1-a b]") == ("t/test_x.py", ["TestK", "test_m"])


def test_an_inherited_test_is_hidden_where_it_is_defined():
    project = Project("demo", "demo", "1", "demo-1.tar.gz", "0" * 64, "MIT", sources=("demo",), tests=("tests",))
    files = {
        "tests/__init__.py": (
            b"class Mixin:\n    def test_shared(self):\n        assert 1\n\n    def test_other(self):\n        pass\n"
        ),
        "tests/test_a.py": b"from . import Mixin\n\n\nclass TestA(Mixin):\n    def test_own(self):\n        pass\n",
        "demo/__init__.py": b"",
    }
    out = visible(project, files, ["tests/test_a.py::TestA::test_shared"])
    assert b"test_shared" not in out["tests/__init__.py"] and b"test_other" in out["tests/__init__.py"]
    assert out["tests/test_a.py"] == files["tests/test_a.py"]
    with pytest.raises(BadRequest, match="cannot be hidden") as err:
        visible(project, files, ["tests/test_a.py::TestA::test_nowhere"])
    assert err.value.field == "target_tests"


def test_model_input_checks():
    assert repo_path("a/b.py") == "a/b.py" and repo_path(".", allow_root=True) == "."
    for bad in ("../x", "/etc/passwd", "a/../../b"):
        with pytest.raises(ToolError, match="outside the repository"):
            repo_path(bad)
    assert selectors("tests/test_a.py::test_b tests/c.py") == ["tests/test_a.py::test_b", "tests/c.py"]
    with pytest.raises(ToolError, match="option"):
        selectors("-k x")
    git = "--- a/p/m.py\n+++ b/p/m.py\n@@ -1 +1 @@\n-a\n+b\n"
    assert patch_strip(git) == 1 and patch_strip(git.replace("a/", "").replace("b/", "")) == 0
    with pytest.raises(ToolError, match="outside"):
        patch_strip("--- /etc/passwd\n+++ /etc/passwd\n")
    with pytest.raises(ToolError, match="headers"):
        patch_strip("@@ -1 +1 @@\n-a\n+b\n")


def test_the_report_parser_reads_every_outcome():
    out = "\n".join(
        [
            "....F",
            "PASSED tests/t.py::test_a[x y]",
            "FAILED tests/t.py::test_b - AssertionError: assert 1 == 2 - extra",
            "PASSED tests/t.py::test_c",
            "ERROR tests/t.py::test_c - teardown failed",
            "ERROR tests/broken.py - ImportError",
            "SKIPPED [1] tests/t.py:3: no",
        ]
    )
    outcomes, messages = parse_outcomes(out)
    assert outcomes == {
        "tests/t.py::test_a[x y]": "PASSED",
        "tests/t.py::test_b": "FAILED",
        "tests/t.py::test_c": "ERROR",
        "tests/broken.py": "ERROR",
    }
    assert messages["tests/t.py::test_b"] == "AssertionError: assert 1 == 2 - extra"


def test_validation_keeps_only_clean_small_failures():
    base = {"t::a", "t::b", "t::c"}

    def run(code: int, **outcomes: str) -> SuiteRun:
        return SuiteRun(code, {f"t::{k}": v for k, v in outcomes.items()})

    assert judge(base, run(1, a="FAILED", b="PASSED", c="PASSED")) == ["t::a"]
    assert judge(base, run(0, a="PASSED", b="PASSED", c="PASSED")) is None  # nothing fails: no bug
    assert judge(base, run(1, a="FAILED", b="PASSED")) is None  # a test went missing
    assert judge(base, run(2, a="ERROR", b="PASSED", c="PASSED")) is None  # interrupted
    many = {f"t::{i}" for i in range(20)}
    assert judge(many, SuiteRun(1, dict.fromkeys(many, "FAILED"))) is None  # breaks everything


def test_the_registry_pins_six_projects_with_tests_apart_from_sources():
    assert len(PROJECTS) >= 5
    for p in PROJECTS.values():
        assert len(p.sha256) == 64 and p.filename.startswith(p.distribution.replace("-", "_"))
        assert not any(p.is_source_path(t) for t in p.tests) and p.is_test_path("x/conftest.py")


def _sdist(tmp_path, name: str, members: dict[str, bytes]) -> Project:
    import hashlib
    import io
    import tarfile

    path = tmp_path / "swe" / "downloads" / f"{name}.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size, info.mode = len(data), 0o600
            tar.addfile(info, io.BytesIO(data))
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return Project("demo", "demo", "1", f"{name}.tar.gz", sha, "MIT", sources=("demo",), tests=("tests",))


def test_a_cached_sdist_is_unpacked_once_readable_by_the_sandbox_and_never_outside_its_folder(tmp_path):
    from rollgate.resources_servers.families.swe.sources import SourceError, cached_source, ensure_source

    good = _sdist(tmp_path, "demo-1", {"demo-1/demo/__init__.py": b"X = 1\n", "demo-1/tests/test_x.py": b""})
    assert cached_source(good, tmp_path) is None
    root = ensure_source(good, tmp_path)
    assert (root / "demo" / "__init__.py").read_bytes() == b"X = 1\n"
    assert (root / "demo" / "__init__.py").stat().st_mode & 0o777 == 0o644  # another uid reads it
    assert cached_source(good, tmp_path) == root
    evil = _sdist(tmp_path, "evil-1", {"evil-1/ok.py": b"", "elsewhere/x.py": b""})
    with pytest.raises(SourceError, match="outside") as err:
        ensure_source(evil, tmp_path)
    assert err.value.step == "extract" and not (tmp_path / "elsewhere").exists()
