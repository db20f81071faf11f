"""The solver / grader pattern (docs/roles.md): a second role judges the first.

Roles: `solver` answers a question with `submit`; then `grader` sees the question and that answer
(never the reference) and rules on it with `grade`. The environment defines each role's reward
from the reference answer, which neither role ever sees:
- solver: 1 when its answer matches the reference, else 0 (the ground truth, not the grader's
  opinion: a solver cannot earn reward by talking the grader round);
- grader: 1 when its ruling agrees with the reference check, else 0.
Not zero-sum: both roles can earn 1 in the same episode. An answer matches when, with case and
surrounding spaces ignored, it equals the reference (numbers compare as numbers).

Row fields: `question` (str), `answer` (str or number: the reference).
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from rollgate.core.schemas import TaskRow, VerifyRequest, VerifyResult
from rollgate.resources_servers.base import Environment, ToolError, tool


class SolveGradeRow(BaseModel):
    model_config = ConfigDict(extra="allow")
    question: str
    answer: str | int | float


class SolveGradeState(BaseModel):
    question: str
    reference: str
    submitted: str | None = None
    ruling: bool | None = None
    inbox: dict[str, list[str]]


def matches(answer: str, reference: str) -> bool:
    a, b = answer.strip().lower(), reference.strip().lower()
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b


class SolveGradeEnv(Environment):
    name = "solve_grade"
    description = "A solver answers, a grader judges the answer; each rewarded against the hidden reference."
    State = SolveGradeState
    Row = SolveGradeRow
    roles: ClassVar[tuple[str, ...]] = ("solver", "grader")

    def seed(self, task: TaskRow, rng: random.Random) -> SolveGradeState:
        row = SolveGradeRow.model_validate(task.env_fields)
        first = f"Question: {row.question}\nAnswer it with submit(answer=...)."
        return SolveGradeState(
            question=row.question, reference=str(row.answer), inbox={"solver": [first], "grader": []}
        )

    def turn(self, state: SolveGradeState) -> str | None:
        if state.submitted is None:
            return "solver"
        return "grader" if state.ruling is None else None

    def observe(self, state: SolveGradeState, role: str) -> str:
        seen, state.inbox[role] = state.inbox[role], []
        return "\n\n".join(seen)

    @tool(role="solver")
    def submit(self, state: SolveGradeState, answer: str) -> str:
        """Submit your final answer to the question."""
        if not answer.strip():
            raise ToolError("the answer is empty")
        state.submitted = answer
        state.inbox["grader"].append(
            f"Question: {state.question}\nProposed answer: {answer}\n"
            "Is the proposed answer correct? Rule with grade(correct=true) or grade(correct=false)."
        )
        return "Submitted; the grader rules next."

    @tool(role="grader")
    def grade(self, state: SolveGradeState, correct: bool) -> str:
        """Rule on the proposed answer: is it correct?"""
        state.ruling = correct
        return "Ruling recorded."

    def verify(self, state: SolveGradeState, request: VerifyRequest) -> VerifyResult:
        right = state.submitted is not None and matches(state.submitted, state.reference)
        if request.role == "solver":
            return VerifyResult(reward=float(right), metrics={"submitted": state.submitted is not None})
        agrees = state.ruling is not None and state.submitted is not None and state.ruling == right
        return VerifyResult(reward=float(agrees), metrics={"ruled": state.ruling is not None})


def example_tasks(n: int, seed: int) -> list[dict[str, Any]]:
    """`n` arithmetic rows (`rollgate tasks solve_grade`), deterministic for `seed`."""
    rng = random.Random(f"solve-grade-rows:{seed}")
    rows = []
    for i in range(n):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        op = rng.choice("+-*")
        answer = a + b if op == "+" else a - b if op == "-" else a * b
        rows.append(
            {
                "responses_create_params": {"input": "Solve, then grade."},
                "env": "solve_grade",
                "task_id": f"solve_grade-{seed}-{i:03d}",
                "question": f"What is {a} {op} {b}?",
                "answer": answer,
            }
        )
    return rows
