"""Math: arithmetic, fractions, word problems and small algebra, with a safe calculator.

Tool: `calculator(expression)` evaluates numbers, + - * / // % ** (bounded exponent), unary minus,
parentheses and sqrt/abs/round/floor/ceil/min/max/log/exp. It is parsed with `ast` against a
whitelist (rollgate.verifiers.mathexpr), never `eval`; anything else, or a result too large
(`9**9**9`), is an error output.

Reward: 1.0 when the final answer is numerically or symbolically equal (sympy) to the row's
`expected_answer` and written in its form (a value for a number or a fraction, an expanded
polynomial for one: rollgate.verifiers.answer_form) and in the form the row's optional
`answer_form` asks for (`lowest_terms`: an integer or a reduced fraction, as the generator's
fractions questions ask), else 0. The final answer is the last
`\\boxed{...}`, else the last `Answer: ...` line, else the last number of the response
(rollgate.verifiers.answers).
"""

from __future__ import annotations

import asyncio
import random
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rollgate.core.schemas import JsonInt, TaskRow, VerifyRequest, VerifyResult
from rollgate.resources_servers.base import Environment, ToolError, final_response_text, tool
from rollgate.resources_servers.envs.math_problems import generate
from rollgate.verifiers.answer_form import LOWEST_TERMS, AskedForm, asked_form_mismatch, form_mismatch
from rollgate.verifiers.answers import extract_final_answer
from rollgate.verifiers.compose import weighted_sum
from rollgate.verifiers.math_equiv import constant_equivalence, looks_structured
from rollgate.verifiers.math_grader import MathGrader
from rollgate.verifiers.mathexpr import MAX_TEXT, ExprError, evaluate, format_number, parse

INSTRUCTIONS = (
    "Solve the math problem. You may call the `calculator` tool for arithmetic (numbers, + - * / // % **, "
    "parentheses, sqrt, abs, round, floor, ceil, min, max, log, exp). Think step by step, then end your "
    "reply with a final line `Answer: <value>`. Give a number (or a fraction like 3/4, or an expression "
    "in x for algebra), without units. The grader reads the last \\boxed{...} if present, else the last "
    "`Answer:` line, else the last number in your reply."
)
MAX_HISTORY = 50
# An answer string as `parse` takes it. JSON Schema has no word for "parses": the format names it
# (a client generator sees a string; the project's schemathesis run generates valid ones).
EXPRESSION_SCHEMA = {"format": "math-expression", "minLength": 1, "maxLength": MAX_TEXT}


class MathRow(BaseModel):
    """The row fields math reads (validated by the runtime before `seed`, published in OpenAPI)."""

    model_config = ConfigDict(extra="allow")
    expected_answer: Annotated[str, Field(json_schema_extra=EXPRESSION_SCHEMA)] | JsonInt | float = Field(
        description="the answer: a number, or an expression (a fraction, or in x for algebra); "
        "after an '=', the right-hand side; or a set, interval, tuple, matrix or \\text{...} in LaTeX"
    )

    @field_validator("expected_answer")
    @classmethod
    def _parses(cls, value: str | int | float) -> str | int | float:
        if isinstance(value, str):
            try:
                parse(value.rsplit("=", 1)[-1], symbols=True, latex=True)
            except ExprError as exc:
                if not looks_structured(value):  # sets, intervals, matrices: math-verify reads them
                    raise ValueError(f"{value[:80]!r} is not a valid expression: {exc}") from None
        return value

    answer_form: AskedForm | None = Field(
        None,
        description="a form the question asks for that the expected answer alone cannot say: 'lowest_terms', "
        "an integer or a fraction with no common factor (a decimal or an unreduced fraction earns 0)",
    )


class MathState(BaseModel):
    expected_answer: str
    answer_form: str | None = None
    calculator_calls: int = 0
    history: list[str] = Field(default_factory=list)


class MathEnv(Environment):
    name = "math"
    description = "Arithmetic and word problems graded by numeric/symbolic equivalence."
    State = MathState
    Row = MathRow
    reverify = "answer"

    def __init__(self) -> None:
        # The environment owns its grading workers (started on the first symbolic answer).
        self.grader = MathGrader()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.grader.close)

    def seed(self, task: TaskRow, rng: random.Random) -> MathState:
        # the runtime validated the row with MathRow
        fields = task.env_fields
        return MathState(expected_answer=str(fields["expected_answer"]), answer_form=fields.get("answer_form"))

    @tool
    def calculator(
        self,
        state: MathState,
        expression: Annotated[str, Field(max_length=MAX_TEXT, description="an arithmetic expression, e.g. (12+7)*3/4")],
    ) -> str:
        """Evaluate an arithmetic expression exactly where possible and return the result."""
        state.calculator_calls += 1
        try:
            result = format_number(evaluate(expression))
        except ExprError as exc:
            raise ToolError(f"cannot evaluate {expression[:80]!r}: {exc}") from None
        if len(state.history) < MAX_HISTORY:
            state.history.append(f"{expression} = {result}")
        return result

    @staticmethod
    def _form_mismatch(answer: str, state: MathState) -> str | None:
        form = form_mismatch(answer, state.expected_answer)
        if form is None and state.answer_form is not None:
            form = asked_form_mismatch(answer, state.answer_form)
        return form

    async def verify(self, state: MathState, request: VerifyRequest) -> VerifyResult:
        answer = extract_final_answer(final_response_text(request))
        if answer is None:
            eq_reason, equal = "no answer found", False
        elif (form := self._form_mismatch(answer, state)) is not None:
            # equal or not, not what was asked: the question's own expression restated, say
            eq_reason, equal = f"form: {form}", False
        else:
            # Constant answers (the common case) compare inline: bounded and cheaper than a thread
            # hand-off. sympy work runs in the grader's worker processes, under its time limit.
            eq = constant_equivalence(answer, state.expected_answer)
            if eq is None:
                eq = await asyncio.to_thread(self.grader.compare, answer, state.expected_answer)
            eq_reason, equal = eq.reason, eq.equal
        return weighted_sum(
            {"correct": 1.0 if equal else 0.0},
            metrics={"answer": answer, "match": eq_reason, "calculator_calls": state.calculator_calls},
        )


def example_tasks(n: int, seed: int) -> list[dict[str, Any]]:
    """`n` math rows, deterministic for `seed`; `gold` holds calculator calls and a correct reply."""
    rng = random.Random(f"math:{seed}")
    rows = []
    for i in range(n):
        p = generate(rng, i)
        rows.append(
            {
                "responses_create_params": {
                    "input": [
                        {"role": "system", "content": INSTRUCTIONS},
                        {"role": "user", "content": p.question},
                    ]
                },
                "env": "math",
                "task_id": f"math-{seed}-{i:03d}",
                "seed": rng.getrandbits(31),
                "category": p.category,
                "question": p.question,
                "expected_answer": p.answer,
                **({"answer_form": LOWEST_TERMS} if p.category == "fractions" else {}),
                "gold": {
                    "calls": [{"name": "calculator", "arguments": {"expression": e}} for e in p.calls],
                    "response": f"{p.working}\nAnswer: {p.answer}",
                },
            }
        )
    return rows
