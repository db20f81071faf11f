"""Running a project's tests with pytest inside a sandbox, and reading the per-test outcomes.

Every run uses the runner directory (pytest and its dependencies, mounted read-only) and the
project's import paths on PYTHONPATH, ignores the project's own `addopts` (coverage options and
plugins that are not installed), and never writes a cache. `-rA` prints one line per test
(`PASSED tests/test_x.py::test_y`), which is all validation reads. The verifier's run adds the guard
plugin (guard.py): the outcomes are then the guard's report, never lines the tested code can print.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rollgate.sandbox import ExecResult, Sandbox, SandboxError
from rollgate.sandbox.isolation import INNER_WORKDIR

PYTEST_FLAGS = ("-p", "no:cacheprovider", "-o", "addopts=", "-o", "console_output_style=classic")
_OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS) (.+)$")
NO_TESTS = 5  # pytest's exit status when nothing was collected
USAGE = 4  # pytest's exit status for a usage error (e.g. a path that does not exist)
GUARD_DIR = ".rollgate-guard"  # in the verification tree only, outside every project's sources
GUARD_MODULE = "rollgate_guard"
NO_PYCACHE = ".no-pycache"  # under the runner directory, which sandboxes mount read-only
# the guard's outcomes in pytest's words; "xfail_called" (pytest.xfail called at run time) has none
_GUARD_WORDS = {"passed": "PASSED", "failed": "FAILED", "xpassed": "XPASS", "xfailed": "XFAIL", "skipped": "SKIPPED"}


@dataclass
class SuiteRun:
    exit_code: int | None
    outcomes: dict[str, str] = field(default_factory=dict)  # node id -> PASSED | FAILED | ERROR | ...
    messages: dict[str, str] = field(default_factory=dict)  # node id -> the short failure message
    result: ExecResult | None = None
    tampered: str | None = None  # why the guard's report cannot be trusted (guarded runs only)

    @property
    def passed(self) -> set[str]:
        return {t for t, o in self.outcomes.items() if o in ("PASSED", "XFAIL")}

    @property
    def failed(self) -> set[str]:
        return {t for t, o in self.outcomes.items() if o in ("FAILED", "ERROR", "XPASS", "XFAIL_CALLED")}


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


def guard_files(changed: Sequence[str], protected: dict[str, bytes] | None = None) -> dict[str, bytes]:
    """The guard plugin, as files to add to a verification tree, with the paths the model changed
    and the files that must not change while the suite runs (the tests and their configuration)."""
    digests = {p: hashlib.sha256(d).hexdigest() for p, d in (protected or {}).items()}
    return {
        f"{GUARD_DIR}/{GUARD_MODULE}.py": (Path(__file__).parent / "guard.py").read_bytes(),
        f"{GUARD_DIR}/changed.json": json.dumps(sorted(changed)).encode(),
        f"{GUARD_DIR}/protected.json": json.dumps(digests, sort_keys=True).encode(),
    }


def pytest_argv(
    python: str,
    runner: str | None,
    python_path: Sequence[str],
    selectors: Sequence[str],
    *extra: str,
    workdir: str = INNER_WORKDIR,
    guard_nonce: str | None = None,
) -> list[str]:
    # a wide terminal: the summary's one-line failure messages are not cut at 80 columns; a fixed
    # hash seed: test ids built from set iteration (isodate's) are the same in every run
    path = pythonpath(runner, python_path, workdir)
    env = ["env", f"PYTHONPATH={path}", "COLUMNS=240", "PYTHONHASHSEED=0"]
    interpreter = [python]
    if guard_nonce is not None:  # the guard first on the path: no project module can shadow it
        env = ["env", f"PYTHONPATH={workdir}/{GUARD_DIR}:{path}", f"ROLLGATE_GUARD_NONCE={guard_nonce}", *env[2:]]
        extra = ("-p", GUARD_MODULE, *extra)
        # bytecode caches (pytest's too) under the read-only runner (or, where the image carries
        # pytest, the container's read-only root), where nothing exists and nothing can be written:
        # no test module is loaded from a cache the tested code wrote
        interpreter = [python, "-X", f"pycache_prefix={runner or ''}/{NO_PYCACHE}"]
    return [*env, *interpreter, "-s", "-m", "pytest", *PYTEST_FLAGS, *extra, "--", *selectors]


def read_guard(stdout: str, nonce: str) -> tuple[dict[str, str], str | None]:
    """The outcomes of the guard's report (in pytest's words) and why they cannot be trusted, if so."""
    mark = f"ROLLGATE-GUARD {nonce} "
    found = [line[len(mark) :] for line in stdout.splitlines() if line.startswith(mark)]
    if len(found) != 1:
        why = "no report" if not found else f"{len(found)} reports"
        return {}, f"the test run ended without the guard's one report ({why}): the process exited early"
    try:
        report = json.loads(found[0])
        raw = report["outcomes"]
        outcomes = {str(k): _GUARD_WORDS.get(str(v), str(v).upper()) for k, v in raw.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}, "the guard's report could not be read"
    if report.get("changed"):
        return outcomes, f"the test runner was modified during the run: {', '.join(report['changed'][:5])}"
    if report.get("altered_files"):
        return outcomes, f"test files were rewritten during the run: {', '.join(report['altered_files'][:5])}"
    if report.get("foreign_importers"):
        return outcomes, f"an import hook was installed during the run: {', '.join(report['foreign_importers'][:5])}"
    if report.get("foreign_plugins"):
        return outcomes, f"the changed code registered pytest plugins: {', '.join(report['foreign_plugins'][:5])}"
    return outcomes, None


async def run_pytest(
    sandbox: Sandbox,
    *,
    python: str,
    runner: str | None,
    python_path: Sequence[str],
    selectors: Sequence[str] = (),
    timeout_s: float = 120.0,
    workdir: str = INNER_WORKDIR,
    guard: bool = False,
) -> SuiteRun:
    """Every outcome of one quiet run (-rA, no tracebacks). Raises SandboxError when the run was
    stopped or its report was cut: a partial report must never be read as failures. With `guard`
    (the sandbox holds guard_files()), the outcomes are the guard's and `tampered` says when they
    cannot be trusted."""
    nonce = secrets.token_hex(16) if guard else None
    argv = pytest_argv(
        python, runner, python_path, selectors, "-q", "-rA", "--tb=no", workdir=workdir, guard_nonce=nonce
    )
    result = await sandbox.exec(argv, timeout_s=timeout_s)
    if result.timed_out or result.killed_by or result.stdout_truncated:
        raise SandboxError(f"the test run was stopped or its report cut ({result.summary()})")
    outcomes, messages = parse_outcomes(result.stdout)
    if nonce is None:
        return SuiteRun(result.exit_code, outcomes, messages, result)
    guarded, tampered = read_guard(result.stdout, nonce)
    return SuiteRun(result.exit_code, guarded, messages, result, tampered)
