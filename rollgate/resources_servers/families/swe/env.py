"""`swe/<project>`: fix a bug injected into a real project, with tools that run in a sandbox.

Seeding rebuilds the buggy checkout from the row (pristine sdist + the row's mutation), cuts the
target tests out of their files, and writes that tree into a fresh sandbox (no network, private
root, its own uid) that lives for the session. Every tool runs there. Verification never trusts
that sandbox's tests: it collects the model's changes, refuses (reward 0, reason in the metrics)
any change to a test file or to the runner's configuration, and runs the whole suite in a second,
fresh sandbox holding the buggy tree with the pristine tests and the model's source changes, with
a guard plugin (guard.py) whose report, not pytest's printed one, gives the outcomes; a run that
ends before that report (an early exit) or that patched pytest scores 0, reason in the metrics.
Reward: the fraction of target tests that pass, or 0 on a regression (another test that passed on
the pristine tree fails, is skipped or is gone); 1.0 exactly when the bug is fixed and nothing broke.
"""

from __future__ import annotations

import logging
import random
import secrets
from typing import Annotated, Any

from pydantic import BaseModel, Field, ValidationError

from rollgate.core.errors import BadRequest, NotFound, field_error
from rollgate.core.metrics import Metrics
from rollgate.core.schemas import TaskRow, VerifyRequest, VerifyResult
from rollgate.core.settings import Settings
from rollgate.resources_servers.base import Environment, ToolError, tool
from rollgate.resources_servers.families.common import input_text
from rollgate.resources_servers.families.swe import checkout, pool, trees
from rollgate.resources_servers.families.swe.mutations import Mutation
from rollgate.resources_servers.families.swe.patches import patch_strip, repo_path, selectors
from rollgate.resources_servers.families.swe.projects import get_project
from rollgate.resources_servers.families.swe.prompts import issue_text
from rollgate.resources_servers.families.swe.sources import SourceError, cached_source, ensure_runner
from rollgate.resources_servers.families.swe.testrun import (
    NO_TESTS,
    USAGE,
    guard_files,
    pytest_argv,
    pythonpath,
    run_pytest,
)
from rollgate.resources_servers.families.swe.warm import CheckoutPool
from rollgate.sandbox import ExecResult, Sandbox, SandboxError, SandboxProvider, check_isolation, make_provider
from rollgate.sandbox.isolation import INNER_WORKDIR

log = logging.getLogger("rollgate.envs.swe")

MAX_READ_LINES = 400
MAX_OUTPUT_CHARS = 8000
SWE_IMAGE = "rollgate-swe:latest"  # built by scripts/docker-swe-image.sh
LIMITS = {"timeout_s": 60, "cpu_s": 120, "max_output_bytes": 2**20, "memory_bytes": 1024 * 2**20}


class SweState(BaseModel):
    project: str
    version: str
    mutation: Mutation
    targets: list[str]
    sandbox: str  # the key of this session's live sandbox in this process
    tool_calls: int = 0


def _tail(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    return text if len(text) <= limit else "[... cut ...]\n" + text[-limit:]


def format_run(r: ExecResult) -> str:
    parts = [r.summary()]
    for name, text in (("stdout", r.stdout), ("stderr", r.stderr)):
        if text.strip():
            parts.append(f"--- {name} ---\n{_tail(text.rstrip())}")
    return "\n".join(parts)


class SweEnv(Environment):
    name = "swe"
    description = "Fix a bug injected into a real Python project; hidden tests decide (sandboxed tools)."
    State = SweState
    reverify = "never"  # the verdict depends on the session's live sandbox

    def __init__(
        self,
        project: str,
        *,
        home: str | None = None,
        provider: SandboxProvider | None = None,
        sandbox: str = "local",
        sandbox_options: dict[str, Any] | None = None,
        warm_pool: int = 0,
        allow_unisolated: bool = False,
        max_tool_calls: int = 64,
        max_sessions: int = 256,
        test_timeout_s: float = 120.0,
        metrics: Metrics | None = None,
    ):
        self.project = get_project(project)
        self.name = f"swe/{project}"
        self.home = home or Settings().home
        if provider is None and sandbox != "local":
            # a container provider runs the one swe image (pytest and patch inside: docs/sandbox.md)
            options = {"limits": LIMITS, "image": SWE_IMAGE, **(sandbox_options or {})}
            provider = make_provider(sandbox, metrics=metrics, **options)
        # the runner directory is mounted read-only into local sandboxes; an image carries its own
        self.runner: str | None = None
        if provider is None or provider.name == "local":
            self.runner = str(ensure_runner(self.home))
            if self.runner.startswith("/tmp/"):
                raise SourceError(
                    "runner", f"Rollgate's home ({self.home}) must not lie under /tmp: sandboxes get a private /tmp"
                )
        if provider is None:
            options = {"limits": LIMITS, "ro_paths": [self.runner], **(sandbox_options or {})}
            provider = make_provider("local", metrics=metrics, **options)
        self.sandboxes = provider
        check_isolation(self.sandboxes, allow_unisolated=allow_unisolated, user=self.name)
        self.python = getattr(self.sandboxes, "python", "python3")
        self.workdir = getattr(self.sandboxes, "sandbox_workdir", INNER_WORKDIR)
        # sandboxes that already hold the pristine checkout: a seed writes only the files that differ
        self.pool = CheckoutPool(self.sandboxes, self._prepare, warm_pool, name=self.name) if warm_pool else None
        self.max_tool_calls = max_tool_calls
        self.max_sessions = max_sessions
        self.test_timeout_s = test_timeout_s
        self._live: dict[str, Sandbox] = {}

    # --- the trees of a task --------------------------------------------------------------
    def _pristine(self) -> checkout.Files:
        root = cached_source(self.project, self.home)
        if root is None:
            raise SourceError(
                "source",
                f"{self.project.requirement} is not in Rollgate's cache: build tasks first "
                f"(`rollgate tasks {self.name} --n 1 --seed 0` fetches it)",
            )
        return checkout.pristine(root)

    def _trees(self, mutation: Mutation, targets: list[str]) -> tuple[checkout.Files, checkout.Files]:
        bug = checkout.buggy(self.project, self._pristine(), mutation)
        checkout.check_targets(self.project, bug, targets)
        return bug, checkout.visible(self.project, bug, targets)

    async def seed(self, task: TaskRow, rng: random.Random) -> tuple[SweState, str | None]:
        fields = task.env_fields
        p = self.project
        if fields.get("project", p.name) != p.name:
            raise BadRequest(
                f"this server runs {self.name}, the row is for {fields.get('project')!r}",
                component=self.name,
                field="project",
            )
        if fields.get("version", p.version) != p.version:
            raise BadRequest(
                f"{self.name} serves version {p.version}, the row is for {fields.get('version')!r}",
                component=self.name,
                field="version",
            )
        try:
            mutation = Mutation.model_validate(fields.get("mutation"))
        except ValidationError as exc:
            raise field_error(
                exc, component=self.name, prefix="mutation", where="not a valid mutation: ", field="mutation"
            ) from None
        targets = fields.get("target_tests")
        if not (isinstance(targets, list) and 0 < len(targets) <= 64 and all(isinstance(t, str) for t in targets)):
            raise BadRequest(
                "target_tests must be a non-empty list of test node ids", component=self.name, field="target_tests"
            )
        _, vis = self._trees(mutation, targets)
        box = await self._checkout(vis)
        key = secrets.token_hex(12)
        self._live[key] = box
        while len(self._live) > self.max_sessions:
            # sessions that expired in the store never reach close_session: the oldest sandbox goes
            oldest = next(iter(self._live))
            log.warning("%s: more than %d live sandboxes; destroying the oldest", self.name, self.max_sessions)
            await self._live.pop(oldest).destroy()
        state = SweState(project=p.name, version=p.version, mutation=mutation, targets=targets, sandbox=key)
        failures = fields.get("failures")
        failures = {str(k): str(v) for k, v in failures.items()} if isinstance(failures, dict) else {}
        prompt = None if input_text(task).strip() else issue_text(self.name, targets, failures)
        return state, prompt

    async def _prepare(self, box: Sandbox) -> None:
        await trees.write_tree(box, self._pristine())

    async def _checkout(self, tree: checkout.Files) -> Sandbox:
        """A sandbox holding `tree`: a warm one (the pristine checkout) with the files that differ
        rewritten, or, with no pool or none ready, a new one written whole."""
        box = await self.pool.take() if self.pool is not None else None
        have: checkout.Files = self._pristine() if box is not None else {}
        if box is None:
            box = await self.sandboxes.create()
        try:
            await trees.morph(box, have, tree)
        except BaseException:
            await box.destroy()
            raise
        return box

    def _box(self, state: SweState) -> Sandbox:
        box = self._live.get(state.sandbox)
        if box is None:
            raise SandboxError(f"{self.name}: this session's sandbox is not held by this process (restarted?)")
        return box

    def _count(self, state: SweState) -> None:
        if state.tool_calls >= self.max_tool_calls:
            raise ToolError(f"tool budget spent ({self.max_tool_calls} calls): finish with a short final message")
        state.tool_calls += 1

    async def close_session(self, state: SweState) -> None:
        box = self._live.pop(state.sandbox, None)
        if box is not None:
            await box.destroy()

    async def aclose(self) -> None:
        if self.pool is not None:
            await self.pool.aclose()
        for key in list(self._live):
            await self._live.pop(key).destroy()

    # --- tools -------------------------------------------------------------------------------
    @tool
    async def list_files(self, state: SweState, path: str = ".") -> str:
        """List the files of the repository under `path` (relative to its root)."""
        self._count(state)
        where = repo_path(path, allow_root=True)
        r = await self._box(state).exec(["find", where, "-type", "f", "-not", "-path", "*/__pycache__/*"])
        if r.exit_code != 0:
            raise ToolError(f"no directory {path!r} in the repository")
        names = sorted(line.removeprefix("./") for line in r.stdout.splitlines() if line)
        return _tail("\n".join(names)) or "(no files)"

    @tool
    async def read_file(
        self,
        state: SweState,
        path: str,
        start_line: Annotated[int, Field(ge=1)] = 1,
        end_line: Annotated[int | None, Field(ge=1)] = None,
    ) -> str:
        """Read lines start_line..end_line (1-based, inclusive; at most 400) of a file of the repository."""
        self._count(state)
        try:
            data = await self._box(state).read_file(repo_path(path))
        except (BadRequest, NotFound) as exc:
            raise ToolError(exc.message) from None
        lines = data.decode("utf-8", "replace").splitlines()
        end = min(end_line or len(lines), len(lines), start_line + MAX_READ_LINES - 1)
        if start_line > max(len(lines), 1):
            raise ToolError(f"{path} has {len(lines)} lines")
        return "\n".join(f"{i:5d}  {lines[i - 1]}" for i in range(start_line, end + 1)) or "(empty file)"

    @tool
    async def search(self, state: SweState, pattern: str, path: str = ".") -> str:
        """Search the repository's files for a regular expression (grep -E); prints file:line:text."""
        self._count(state)
        where = repo_path(path, allow_root=True)
        # without a path operand grep searches the working directory and prints paths without "./"
        argv = ["grep", "-rnIE", "--exclude-dir=__pycache__", "--", pattern, *([] if where == "." else [where])]
        r = await self._box(state).exec(argv)
        if r.exit_code == 1:
            return "no matches"
        if r.exit_code != 0:
            raise ToolError(f"search failed: {r.stderr.strip()[:500]}")
        return _tail(r.stdout)

    @tool
    async def write_file(self, state: SweState, path: str, content: str) -> str:
        """Create or replace a file of the repository with `content`."""
        self._count(state)
        try:
            await self._box(state).write_file(repo_path(path), content)
        except BadRequest as exc:
            raise ToolError(exc.message) from None
        return f"wrote {path} ({len(content.splitlines())} lines)"

    @tool
    async def apply_patch(self, state: SweState, patch: str) -> str:
        """Apply a unified diff (as `git diff` prints it) to the repository; nothing changes if a hunk fails."""
        self._count(state)
        strip = patch_strip(patch)
        box = self._box(state)
        argv = ["patch", f"-p{strip}", "--batch", "--forward", "--no-backup-if-mismatch", "-r", "-"]
        dry = await box.exec([*argv, "--dry-run"], stdin=patch)
        if dry.exit_code != 0:
            raise ToolError(f"the patch does not apply (nothing was changed):\n{_tail(dry.stdout + dry.stderr, 3000)}")
        done = await box.exec(argv, stdin=patch)
        if done.exit_code != 0:
            raise ToolError(f"the patch failed:\n{_tail(done.stdout + done.stderr, 3000)}")
        return done.stdout.strip() or "patch applied"

    @tool
    async def run_tests(self, state: SweState, selector: str = "") -> str:
        """Run the repository's visible tests with pytest: all of them, or those a selector names
        (space-separated paths or node ids such as tests/test_x.py::test_y)."""
        self._count(state)
        chosen = selectors(selector)
        argv = pytest_argv(
            self.python, self.runner, self.project.python_path, chosen, "-q", "--tb=short", workdir=self.workdir
        )
        r = await self._box(state).exec(argv, timeout_s=self.test_timeout_s)
        if r.exit_code in (NO_TESTS, USAGE) and chosen:
            raise ToolError(f"selector {selector!r} matches no test:\n{_tail(r.stdout + r.stderr, 2000)}")
        return format_run(r)

    @tool
    async def shell(self, state: SweState, command: str) -> str:
        """Run a shell command (sh -c) in the repository's root; no network. The project is importable."""
        self._count(state)
        env = ["env", f"PYTHONPATH={pythonpath(self.runner, self.project.python_path, self.workdir)}"]
        return format_run(await self._box(state).exec([*env, "sh", "-c", command]))

    # --- verification ----------------------------------------------------------------------------
    async def verify(self, state: SweState, request: VerifyRequest) -> VerifyResult:
        bug, vis = self._trees(state.mutation, state.targets)
        zero = {"targets_fixed": 0.0, "regressions": 0.0}
        changes, problem = await trees.changes(self._box(state), vis)
        if problem is None:
            edited = sorted(p for p in changes if self.project.is_test_path(p))
            if edited:
                problem = f"a test file or the test runner's configuration was changed: {', '.join(edited[:10])}"
        if problem is not None:
            return VerifyResult(reward=0.0, reward_components=zero, metrics={"error": problem, "rejected": True})
        # Only the project's code is carried over: a new file elsewhere (a sitecustomize.py at the
        # root, which the interpreter would import before pytest) never reaches the verifier.
        carried = {p: d for p, d in changes.items() if self.project.in_sources(p)}
        final = {**bug, **{p: d for p, d in carried.items() if d is not None}}
        for path in [p for p, d in carried.items() if d is None]:
            final.pop(path, None)
        box = await self._checkout(final)
        try:
            protected = {p: d for p, d in final.items() if self.project.is_test_path(p)}
            await trees.write_tree(box, guard_files(carried, protected))
            run = await run_pytest(
                box,
                python=self.python,
                runner=self.runner,
                python_path=self.project.python_path,
                timeout_s=self.test_timeout_s,
                workdir=self.workdir,
                guard=True,
            )
        finally:
            await box.destroy()
        if run.tampered is not None:  # the project's code played with the test process (testrun.read_guard)
            metrics = {"error": run.tampered, "rejected": True, "changed_files": sorted(carried)[:50]}
            return VerifyResult(reward=0.0, reward_components=zero, metrics=metrics)
        fixed = [t for t in state.targets if t in run.passed]
        # a test that passed on the pristine tree and no longer passes (failed, skipped by the
        # changed code, or gone) is a regression; without a recorded baseline, the failed ones
        known = pool.baseline(self.project, self.home)
        lost = (known - set(state.targets) - run.passed) if known is not None else set()
        regressions = sorted((run.failed - set(state.targets)) | lost)
        share = len(fixed) / len(state.targets)
        reward = 0.0 if regressions else share
        metrics: dict[str, Any] = {
            "targets_fixed": len(fixed),
            "targets": len(state.targets),
            "regressions": len(regressions),
            "regressed_tests": regressions[:20],
            "changed_files": sorted(carried)[:50],
            "ignored_files": sorted(set(changes) - set(carried))[:50],
            "resolved": reward == 1.0,
        }
        return VerifyResult(
            reward=reward, reward_components={"targets_fixed": share, "regressions": reward - share}, metrics=metrics
        )
