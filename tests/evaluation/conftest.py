"""Helpers of the evaluation tests: task rows whose answers are known by construction.

The model is the scripted backend (rollgate/model_server/scripted.py): each row carries the
script of its reply in `responses_create_params.metadata.rollgate_script`, so whether a sample
is correct is decided when the row is written. Metadata is request plumbing, not task content:
two rows that differ only in their script are the same task (samples.content_hash)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollgate.cli import main
from rollgate.core import jsonutil

INSTRUCTIONS = "Solve the problem. End with a line `Answer: <value>`."


def math_row(task_id: str, a: int, b: int, reply: str | None = None, *, category: str = "sum", calc: bool = False):
    """`a + b`, answered with `reply` (default: the right answer). `calc`: call the calculator first."""
    answer = reply if reply is not None else str(a + b)
    script = [{"text": f"The sum is {answer}.\nAnswer: {answer}"}]
    if calc:
        script = [{"call": {"name": "calculator", "arguments": {"expression": f"{a}+{b}"}}}, *script]
    return {
        "responses_create_params": {
            "input": [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": f"What is {a} + {b}?"}],
            "metadata": {"rollgate_script": json.dumps(script)},
        },
        "env": "math",
        "task_id": task_id,
        "category": category,
        "expected_answer": str(a + b),
    }


def write_jsonl(path: Path, rows) -> Path:
    path.write_bytes(b"".join(jsonutil.dumps(r) + b"\n" for r in rows))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [jsonutil.loads(x) for x in path.read_bytes().splitlines() if x.strip()]


def report_of(out: Path) -> dict:
    return jsonutil.loads((out / "report.json").read_bytes())


@pytest.fixture
def run_cli(capsys):
    """Run `rollgate ...` in process; return (exit status, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        rc = main([str(a) for a in args])
        captured = capsys.readouterr()
        return rc, captured.out, captured.err

    return run


SCRIPTED = ("--backend", "scripted", "--no-progress")
