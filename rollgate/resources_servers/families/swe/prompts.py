"""What the model reads: the system prompt and the issue, which describes the failure (the failing
tests' names and errors), never the change that caused it."""

from __future__ import annotations

SYSTEM_PROMPT = (
    "You are a software engineer working in a Python repository checked out in a sandbox (no network). "
    "Tools: list_files, read_file, search, write_file, apply_patch (a unified diff), run_tests (pytest, "
    "optionally with a selector) and shell. Find the bug described in the issue and fix it in the "
    "project's source code. Do not change test files or the test configuration: such a change scores 0. "
    "Tests that reproduce the issue are hidden; they and the visible tests decide the reward. When you "
    "are done, reply with a short summary of your fix."
)


def issue_text(env: str, targets: list[str], failures: dict[str, str]) -> str:
    shown = targets[:3]
    lines = [f"Bug report for {env.split('/', 1)[-1]}: these tests fail on the current code."]
    for t in shown:
        message = (failures.get(t) or "").strip()
        lines.append(f"- {t}" + (f"\n  {message}" if message else ""))
    if len(targets) > len(shown):
        lines.append(f"(and {len(targets) - len(shown)} more)")
    lines.append("They are not in your checkout. Fix the code so that they pass without breaking other tests.")
    return "\n".join(lines)
