"""Running a project's tests with pytest inside a sandbox, and reading the per-test outcomes.

Every run uses the runner directory (pytest and its dependencies, mounted read-only) and the
project's import paths on PYTHONPATH, ignores the project's own `addopts` (coverage options and
plugins that are not installed), and never writes a cache. `-rA` prints one line per test
(`PASSED tests/test_x.py::test_y`), which is all the verifier reads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from rollgate.sandbox import ExecResult, Sandbox, SandboxError
from rollgate.sandbox.isolation import INNER_WORKDIR

PYTEST_FLAGS = ("-p", "no:cacheprovider", "-o", "addopts=", "-o", "console_output_style=classic")
_OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS) (.+)$")
NO_TESTS = 5  # pytest's exit status when nothing was collected
USAGE = 4  # pytest's exit status for a usage error (e.g. a path that does not exist)


@dataclass
class SuiteRun:
    exit_code: int | None
    outcomes: dict[str, str] = field(default_factory=dict)  # node id -> PASSED | FAILED | ERROR | ...
    messages: dict[str, str] = field(default_factory=dict)  # node id -> the short failure message
    result: ExecResult | None = None

    @property
    def passed(self) -> set[str]:
        return {t for t, o in self.outcomes.items() if o in ("PASSED", "XFAIL")}

    @property
    def failed(self) -> set[str]:
        return {t for t, o in self.outcomes.items() if o in ("FAILED", "ERROR", "XPASS")}


def parse_outcomes(stdout: str) -> tuple[dict[str, str], dict[str, str]]:
    outcomes: dict[str, str] = {}
    messages: dict[str, str] = {}
    for line in stdout.splitlines():
        m = _OUTCOME.match(line)
        if m is None:
            continue
        outcome, rest = m.groups()
        node, _, message = rest.partition(" - ")
        node = node.rstrip()
        # a test that fails in teardown reports PASSED and then ERROR: the worse one counts
        if outcomes.get(node) in ("FAILED", "ERROR"):
            continue
        outcomes[node] = outcome
        if message:
            messages[node] = message.strip()[:300]
    return outcomes, messages


def pythonpath(runner: str | None, python_path: Sequence[str], workdir: str = INNER_WORKDIR) -> str:
    """The runner directory (None: pytest is installed in the sandbox's image) and the project's
    import paths under the sandbox's work dir."""
    inner = [workdir if p in (".", "") else f"{workdir}/{p}" for p in python_path]
    return ":".join([*([runner] if runner else []), *inner])


def pytest_argv(
    python: str,
    runner: str | None,
    python_path: Sequence[str],
    selectors: Sequence[str],
    *extra: str,
    workdir: str = INNER_WORKDIR,
) -> list[str]:
    # a wide terminal: the summary's one-line failure messages are not cut at 80 columns; a fixed
    # hash seed: test ids built from set iteration (isodate's) are the same in every run
    env = ["env", f"PYTHONPATH={pythonpath(runner, python_path, workdir)}", "COLUMNS=240", "PYTHONHASHSEED=0"]
    return [*env, python, "-s", "-m", "pytest", *PYTEST_FLAGS, *extra, "--", *selectors]


async def run_pytest(
    sandbox: Sandbox,
    *,
    python: str,
    runner: str | None,
    python_path: Sequence[str],
    selectors: Sequence[str] = (),
    timeout_s: float = 120.0,
    workdir: str = INNER_WORKDIR,
) -> SuiteRun:
    """Every outcome of one quiet run (-rA, no tracebacks). Raises SandboxError when the run was
    stopped or its report was cut: a partial report must never be read as failures."""
    argv = pytest_argv(python, runner, python_path, selectors, "-q", "-rA", "--tb=no", workdir=workdir)
    result = await sandbox.exec(argv, timeout_s=timeout_s)
    if result.timed_out or result.killed_by or result.stdout_truncated:
        raise SandboxError(f"the test run was stopped or its report cut ({result.summary()})")
    outcomes, messages = parse_outcomes(result.stdout)
    return SuiteRun(result.exit_code, outcomes, messages, result)
