"""The `code` environment: write a Python function; run code and the visible tests in a sandbox;
the final answer is judged by hidden unit tests in the sandbox.

Row fields (beside `responses_create_params`): `function_name`, `hidden_tests` {group: [[call,
expected literal], ...]}, optional `visible_tests` [[call, expected], ...]; or just `code_task`
naming a task of the shipped bank (code_tasks.py). Reward = fraction of hidden tests passed, with
one component per test group (the components sum to the reward).
"""

from __future__ import annotations

import ast
import logging
import random
import re
from typing import Annotated, Any

from pydantic import BaseModel, Field

from rollgate.core.metrics import Metrics
from rollgate.core.schemas import TaskRow, VerifyRequest, VerifyResult
from rollgate.resources_servers.base import Environment, ToolError, final_response_text, tool
from rollgate.resources_servers.envs.code_harness import SOLUTION_FILE, HarnessReport, harness_source, judge, new_nonce
from rollgate.resources_servers.envs.code_tasks import BY_ID, TASKS, CodeTask
from rollgate.sandbox import ExecResult, SandboxError, SandboxProvider, check_isolation, make_provider

log = logging.getLogger(__name__)

MAX_CODE_CHARS = 64_000
MAX_STDIN_CHARS = 1_000_000
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

SYSTEM_PROMPT = (
    "You are an expert Python programmer. Implement the requested function. You may call the tools "
    "`run_code` (run a Python program, with optional stdin) and `run_tests` (run your function against "
    "the visible examples) as often as you need. Hidden tests decide the reward. End with your complete "
    "solution (the function and any imports it needs) in one ```python code block."
)


class CodeState(BaseModel):
    function_name: str
    visible: list[tuple[str, str]] = Field(default_factory=list)
    hidden: dict[str, list[tuple[str, str]]]
    tool_calls: int = 0


def extract_code(text: str) -> str | None:
    """The last fenced Python block of the final response (None when there is none)."""
    blocks = _FENCE.findall(text or "")
    return blocks[-1] if blocks else None


def _tests(value: Any, where: str) -> list[tuple[str, str]]:
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list of [call, expected] pairs")
    out = []
    for i, pair in enumerate(value):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise ValueError(f"{where}[{i}] must be a [call expression, expected literal] pair of strings")
        try:
            ast.parse(pair[0], mode="eval")
            ast.literal_eval(pair[1])
        except (SyntaxError, ValueError) as exc:
            raise ValueError(f"{where}[{i}] is not a valid call / literal: {exc}") from None
        out.append((pair[0], pair[1]))
    return out


def prompt_for(task: CodeTask) -> str:
    examples = "\n".join(f"    {call} == {expected}" for call, expected in task.visible)
    return (
        f'Write this Python function:\n\n```python\n{task.signature}\n    """{task.doc}"""\n```\n\n'
        f"Examples:\n{examples}"
    )


def task_row(task: CodeTask, task_id: str) -> dict[str, Any]:
    """A NeMo Gym row for a bank task. Only `responses_create_params` is shown to the model; the hidden
    tests and the reference solutions stay with the environment and the tests."""
    return {
        "responses_create_params": {
            "input": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt_for(task)}]
        },
        "env": "code",
        "task_id": task_id,
        "function_name": task.function_name,
        "visible_tests": [list(t) for t in task.visible],
        "hidden_tests": {g: [list(t) for t in tests] for g, tests in task.hidden.items()},
        "gold_solution": task.gold,
        "wrong_solution": task.wrong,
        "gold": {
            "calls": [{"name": "run_tests", "arguments": {"code": task.gold}}],
            "response": f"Here is my solution.\n\n```python\n{task.gold}```",
        },
    }


def example_tasks(n: int, seed: int) -> list[dict[str, Any]]:
    """n example rows in a seed-determined order (the bank repeats, with new ids, past its size)."""
    order = list(TASKS)
    random.Random(seed).shuffle(order)
    return [task_row(order[i % len(order)], f"code-{seed}-{i:03d}") for i in range(n)]


def format_run(r: ExecResult) -> str:
    parts = [f"{r.summary()} ({r.duration_s:.2f}s)"]
    for name, text, cut in (("stdout", r.stdout, r.stdout_truncated), ("stderr", r.stderr, r.stderr_truncated)):
        if text:
            parts.append(f"--- {name}{' (truncated)' if cut else ''} ---\n{text.rstrip()}")
    return "\n".join(parts)


class CodeEnv(Environment):
    name = "code"
    description = "Write a Python function; run code and visible tests in a sandbox; hidden tests decide."
    State = CodeState
    reverify = "answer"

    def __init__(
        self,
        provider: SandboxProvider | str = "local",
        *,
        limits: dict[str, Any] | None = None,
        max_tool_calls: int = 32,
        per_test_timeout_s: float = 2.0,
        metrics: Metrics | None = None,
        allow_unisolated: bool = False,
        **provider_options: Any,
    ):
        if isinstance(provider, str):
            opts = dict(provider_options)
            if limits is not None:
                opts["limits"] = limits
            if provider == "remote":
                # the service's default wall clock is what the client waits for; the service checks isolation
                opts.pop("limits", None)
                opts["allow_unisolated"] = allow_unisolated
            provider = make_provider(provider, metrics=metrics, **opts)
        # Model-written code never runs unisolated by accident (issue 15): refuse to start instead.
        check_isolation(provider, allow_unisolated=allow_unisolated)
        self.sandboxes = provider
        self.max_tool_calls = max_tool_calls
        self.per_test_timeout_s = per_test_timeout_s

    def seed(self, task: TaskRow, rng: random.Random):
        fields = task.env_fields
        if "hidden_tests" not in fields and "code_task" in fields:
            bank = BY_ID.get(str(fields["code_task"]))
            if bank is None:
                raise ValueError(f"code_task {fields['code_task']!r} is not in the task bank")
            return CodeState(function_name=bank.function_name, visible=bank.visible, hidden=bank.hidden)
        name = fields.get("function_name")
        if not isinstance(name, str) or not _IDENT.match(name):
            raise ValueError("function_name must be a Python identifier")
        hidden = fields.get("hidden_tests")
        if not isinstance(hidden, dict) or not hidden:
            raise ValueError("hidden_tests must be a non-empty object {group: [[call, expected], ...]}")
        groups = {str(g): _tests(t, f"hidden_tests.{g}") for g, t in hidden.items()}
        if not any(groups.values()):
            raise ValueError("hidden_tests holds no test")
        visible = _tests(fields.get("visible_tests", []), "visible_tests")
        return CodeState(function_name=name, visible=visible, hidden=groups)

    def _count_call(self, state: CodeState) -> None:
        if state.tool_calls >= self.max_tool_calls:
            raise ToolError(f"tool budget spent ({self.max_tool_calls} calls); give your final answer")
        state.tool_calls += 1

    async def _run_harness(
        self, state: CodeState, code: str, tests: list[tuple[str, str]]
    ) -> tuple[HarnessReport, ExecResult]:
        # The tests' calls enter a sandbox of their own, created for this check only; their expected
        # values never do. The nonce travels on stdin, read by the supervisor before the solution runs.
        nonce = new_nonce()
        sandbox = await self.sandboxes.create()
        try:
            await sandbox.write_file(SOLUTION_FILE, code)
            source = harness_source(state.function_name, [c for c, _ in tests], self.per_test_timeout_s)
            result = await sandbox.exec(code=source, stdin=nonce + "\n")
        finally:
            await sandbox.destroy()
        report = judge(result.stdout, tests, nonce)
        if not report.started:
            # The harness died before the program ran: an infrastructure failure, never a reward of 0.
            raise SandboxError(f"the test harness did not start ({result.summary()}): {result.stderr.strip()[-300:]}")
        return report, result

    @tool
    async def run_code(
        self,
        state: CodeState,
        code: Annotated[str, Field(max_length=MAX_CODE_CHARS, description="a complete Python program")],
        stdin: Annotated[str, Field(max_length=MAX_STDIN_CHARS, description="standard input")] = "",
    ) -> str:
        """Run a Python program in a fresh sandbox (no network) and return its exit status, stdout and stderr."""
        self._count_call(state)
        sandbox = await self.sandboxes.create()
        try:
            result = await sandbox.exec(code=code, stdin=stdin)
        finally:
            await sandbox.destroy()
        return format_run(result)

    @tool
    async def run_tests(
        self,
        state: CodeState,
        code: Annotated[str, Field(max_length=MAX_CODE_CHARS, description="Python source defining the function")],
    ) -> str:
        """Run the function defined in `code` against the visible example tests and report each result."""
        self._count_call(state)
        if not state.visible:
            raise ToolError("this task has no visible tests; use run_code to try your function")
        report, run = await self._run_harness(state, code, state.visible)
        if report.load_error:
            raise ToolError(f"your code failed to load: {report.load_error}")
        lines = [f"{report.passed}/{len(report.outcomes)} visible tests passed"]
        for o in report.outcomes:
            lines.append(f"PASS {o.call}" if o.passed else f"FAIL {o.call}: expected {o.expected}, got {o.got}")
        if run.timed_out or run.killed_by:
            lines.append(f"(the run was stopped: {run.summary()})")
        if run.stderr.strip():
            lines.append("--- your program's output (stderr) ---\n" + run.stderr.strip()[-2000:])
        return "\n".join(lines)

    async def verify(self, state: CodeState, request: VerifyRequest) -> VerifyResult:
        groups = state.hidden
        total = sum(len(t) for t in groups.values())
        zero = {g: 0.0 for g in groups}
        code = extract_code(final_response_text(request))
        if code is None:
            return VerifyResult(
                reward=0.0,
                reward_components=zero,
                metrics={"error": "no ```python code block in the final response", "passed": 0, "total": total},
            )
        if len(code) > MAX_CODE_CHARS:
            return VerifyResult(
                reward=0.0,
                reward_components=zero,
                metrics={"error": f"code longer than {MAX_CODE_CHARS} characters", "passed": 0, "total": total},
            )
        flat = [(g, t) for g, tests in groups.items() for t in tests]
        report, run = await self._run_harness(state, code, [t for _, t in flat])
        passed_by_group = dict(zero)
        for (group, _), outcome in zip(flat, report.outcomes, strict=True):
            if outcome.passed:
                passed_by_group[group] += 1
        components = {g: passed_by_group[g] / total for g in groups}
        metrics: dict[str, Any] = {
            "passed": report.passed,
            "total": total,
            "passed_by_group": {g: int(v) for g, v in passed_by_group.items()},
            "duration_s": run.duration_s,
        }
        if report.load_error:
            metrics["error"] = f"load: {report.load_error}"
        if run.timed_out or run.killed_by:
            metrics["stopped"] = run.summary()
        return VerifyResult(reward=report.passed / total, reward_components=components, metrics=metrics)
