"""The swe verifier's guard (families/swe/guard.py): the model's code runs inside the verifier's
pytest process, so it could exit early with status 0, print a report of passing tests, patch pytest
or register a plugin that rewrites reports. Real sdist, real pytest, real bubblewrap sandbox: each
trick first shown to fool an unguarded run of the hidden tests, then scored 0 by the verifier."""

from __future__ import annotations

import pytest

from rollgate.evaluation.audit.swe_payloads import MODULE_PAYLOADS
from rollgate.resources_servers.families.swe import checkout
from rollgate.resources_servers.families.swe.mutations import Mutation
from rollgate.resources_servers.families.swe.testrun import guard_files, read_guard, run_pytest
from tests.envs import test_swe_env as swe

# the swe tests' fixtures (the first validated tasks of `parse`, its environment and runtime)
swe_home, parse_rows, env, rt = swe.swe_home, swe.parse_rows, swe.env, swe.rt
play, gold_calls = swe.play, swe.gold_calls

MODULE = "parse/__init__.py"


async def _suite(env, files, *, guard: bool):
    box = await env.sandboxes.create()
    try:
        protected = {p: d for p, d in files.items() if env.project.is_test_path(p)}
        for path, data in {**files, **(guard_files([MODULE], protected) if guard else {})}.items():
            await box.write_file(path, data)
        kw = {"python": env.python, "runner": env.runner, "python_path": env.project.python_path}
        return await run_pytest(box, **kw, guard=guard)
    finally:
        await box.destroy()


@pytest.mark.parametrize(
    "trick, why",
    [
        ("patch_runner", "test runner was modified"),
        ("xfail_runner", "test runner was modified"),
        ("plugin_hook", "registered pytest plugins: parse/__init__.py"),
        ("fake_report", "ended without the guard's one report"),
        ("rewrite_tests", "test files were rewritten during the run: tests/test_bugs.py"),
        ("import_hook", "an import hook was installed during the run: parse._RgTestFinder"),
        ("plant_pyc", None),  # bytecode caches live under the read-only runner: nothing to plant
    ],
)
async def test_a_trick_that_fools_a_plain_run_is_caught_by_the_guard(env, parse_rows, trick, why):
    row = parse_rows[0]
    targets = row["target_tests"]
    payload = MODULE_PAYLOADS[trick](targets)
    bug = checkout.buggy(env.project, checkout.pristine(_root(env)), Mutation(**row["mutation"]))
    rigged = {**bug, MODULE: bug[MODULE] + b"\n" + payload.encode() + b"\n"}
    plain = await _suite(env, rigged, guard=False)
    assert set(targets) <= plain.passed and not plain.failed & set(targets), plain.outcomes  # the hole was real
    guarded = await _suite(env, rigged, guard=True)
    if why is None:
        assert guarded.tampered is None and set(targets) <= guarded.failed, guarded.outcomes
    else:
        assert guarded.tampered is not None and why in guarded.tampered, guarded.tampered


def _root(env):
    from rollgate.resources_servers.families.swe.sources import cached_source

    return cached_source(env.project, env.home)


async def test_the_guard_reports_the_same_outcomes_as_pytest_on_honest_code(env, parse_rows):
    row = parse_rows[0]
    bug = checkout.buggy(env.project, checkout.pristine(_root(env)), Mutation(**row["mutation"]))
    plain, guarded = await _suite(env, bug, guard=False), await _suite(env, bug, guard=True)
    assert guarded.tampered is None
    assert guarded.passed == plain.passed and guarded.failed == plain.failed
    assert set(row["target_tests"]) <= guarded.failed and len(guarded.passed) > 50


@pytest.mark.parametrize(
    "trick, why",
    [
        ("exit_source", "ended without the guard's one report"),
        ("patch_runner", "test runner was modified"),
        ("xfail_runner", "test runner was modified"),
        ("plugin_hook", "registered pytest plugins"),
        ("import_hook", "an import hook was installed"),
    ],
)
async def test_the_verifier_scores_a_gamed_test_process_zero_even_beside_the_fix(rt, parse_rows, trick, why):
    row = parse_rows[0]
    append = f"cat >> {MODULE} <<'EOF'\n{MODULE_PAYLOADS[trick](row['target_tests'])}\nEOF\n"
    result, outs = await play(rt, row, [*gold_calls(row), ("shell", {"command": append})])
    assert outs[-1].output.startswith("exit code 0"), outs[-1].output
    assert result.reward == 0.0 and result.metrics["rejected"], result
    assert why in result.metrics["error"]


async def test_a_fix_that_skips_the_tests_it_breaks_is_a_regression(rt, parse_rows):
    row = parse_rows[0]
    assert not any("test_findall" in t for t in row["target_tests"])
    # findall broken, and its tests skipped instead of failed: nothing FAILED, yet they no longer pass
    sabotage = "def findall(*args, **kwargs):\n    import pytest\n\n    pytest.skip('not supported')\n"
    append = f"cat >> {MODULE} <<'EOF'\n{sabotage}\nEOF\n"
    result, _ = await play(rt, row, [*gold_calls(row), ("shell", {"command": append})])
    assert result.reward == 0.0 and result.metrics["targets_fixed"] == len(row["target_tests"]), result
    assert result.metrics["regressions"] > 0
    assert all("test_findall" in t for t in result.metrics["regressed_tests"]), result.metrics


def test_only_the_guards_one_report_with_the_runs_nonce_is_read():
    good = 'ROLLGATE-GUARD abc {"outcomes": {"t::a": "passed", "t::b": "xfail_called"}, "changed": []}'
    outcomes, why = read_guard(f"PASSED t::c\nROLLGATE-GUARD other {{}}\n{good}\n", "abc")
    assert why is None and outcomes == {"t::a": "PASSED", "t::b": "XFAIL_CALLED"}  # other lines are not read
    assert "no report" in read_guard("PASSED t::a\n", "abc")[1]
    assert "2 reports" in read_guard(f"{good}\n{good}\n", "abc")[1]
    assert "could not be read" in read_guard("ROLLGATE-GUARD abc {not json\n", "abc")[1]
    changed = 'ROLLGATE-GUARD abc {"outcomes": {}, "changed": ["_pytest.runner.call_and_report"]}'
    assert "_pytest.runner.call_and_report" in read_guard(changed, "abc")[1]
    altered = 'ROLLGATE-GUARD abc {"outcomes": {}, "changed": [], "altered_files": ["tests/test_x.py"]}'
    assert "rewritten during the run: tests/test_x.py" in read_guard(altered, "abc")[1]
