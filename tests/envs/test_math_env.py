"""The math environment: a calculator that cannot be abused, and answer grading by equivalence."""

from __future__ import annotations

import time

import pytest

from rollgate.core.errors import BadRequest
from rollgate.core.schemas import VerifyRequest
from tests.envs.gold import runtime

ROW = {"responses_create_params": {"input": "What is 3/4 + 1/2?"}, "env": "math", "expected_answer": "5/4"}


async def test_calculator_evaluates_exactly():
    rt = runtime("math")
    sid = (await rt.seed(ROW)).session_id
    cases = {
        "3/4 + 1/2": "1.25",
        "(12 + 7) * 3": "57",
        "2 ** 10": "1024",
        "sqrt(81) + abs(-2)": "11",
        "17 // 5": "3",
        "17 % 5": "2",
        "round(2 / 3, 3)": "0.667",
        "-(4 - 10)": "6",
    }
    for expr, want in cases.items():
        out = await rt.call_tool(sid, "calculator", {"expression": expr})
        assert not out.is_error and out.output == want, (expr, out)
    state = await rt.state(sid)
    assert state["calculator_calls"] == len(cases)


@pytest.mark.parametrize(
    "expr,needle",
    [
        ("__import__('os').system('id')", "may be called"),
        ("().__class__.__bases__", "not allowed"),
        ("open('/etc/passwd')", "may be called"),
        ("x + 1", "unknown name"),
        ("lambda: 1", "not allowed"),
        ("[1] * 10", "not allowed"),
        ("'a' * 3", "only numbers"),
        ("1 / 0", "division by zero"),
        ("9**9**9", "exponent"),
        ("10.0 ** 400", "too large"),
        ("(2**1000)**1000", "too large"),
        ("1 +", "not a valid expression"),
    ],
)
async def test_calculator_rejects_unsafe_or_huge_input_as_error_output(expr, needle):
    rt = runtime("math")
    sid = (await rt.seed(ROW)).session_id
    t0 = time.monotonic()
    out = await rt.call_tool(sid, "calculator", {"expression": expr})
    assert time.monotonic() - t0 < 1.0
    assert out.is_error and needle in out.output, out


async def test_calculator_wrong_argument_types_are_error_outputs():
    rt = runtime("math")
    sid = (await rt.seed(ROW)).session_id
    for args in ({"expression": 42}, {}, {"expr": "1+1"}, {"expression": "1" * 600}):
        out = await rt.call_tool(sid, "calculator", args)
        assert out.is_error and "expr" in out.output, (args, out)  # the error names the argument


@pytest.mark.parametrize(
    "response,reward",
    [
        ("3/4 + 1/2 = 5/4\nAnswer: 5/4", 1.0),
        ("The sum is \\boxed{\\frac{5}{4}}.", 1.0),
        ("So we get 1.25", 1.0),
        ("Answer: 1.25 (that is five quarters)", 0.0),  # the Answer line must hold only the value
        ("Answer: 1.2", 0.0),
        ("I do not know.", 0.0),
        ("", 0.0),
    ],
)
async def test_final_answer_is_graded_by_equivalence(response, reward):
    rt = runtime("math")
    sid = (await rt.seed(ROW)).session_id
    result = await rt.verify(sid, VerifyRequest(response=response))
    assert result.reward == reward, (response, result)
    assert result.reward_components == {"correct": reward}


async def test_answer_is_read_from_the_transcript_when_no_response_is_given():
    rt = runtime("math")
    sid = (await rt.seed(ROW)).session_id
    transcript = [
        {"type": "message", "role": "user", "content": "What is 3/4 + 1/2?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Answer: 5/4"}]},
    ]
    result = await rt.verify(sid, VerifyRequest(transcript=transcript))
    assert result.reward == 1.0


@pytest.mark.parametrize(
    "row,needle",
    [
        ({"responses_create_params": {"input": "q"}}, "expected_answer"),
        ({"responses_create_params": {"input": "q"}, "expected_answer": ["1"]}, "expected_answer"),
        ({"responses_create_params": {"input": "q"}, "expected_answer": "__import__('os')"}, "not a valid expression"),
        ({"responses_create_params": {"input": "q"}, "expected_answer": "1", "env": "wordle"}, "wordle"),
    ],
)
async def test_malformed_rows_are_bad_requests(row, needle):
    rt = runtime("math")
    with pytest.raises(BadRequest) as exc:
        await rt.seed(row)
    assert needle in str(exc.value)


@pytest.mark.parametrize(
    "expected, response, reward",
    [
        ("\\{1, 2\\}", "Answer: \\{2, 1\\}", 1.0),  # sets, intervals: math-verify grades them
        ("\\{1, 2\\}", "Answer: \\{1, 3\\}", 0.0),
        ("(0, 1]", "The interval is \\boxed{(0,1]}", 1.0),
        ("(0, 1]", "Answer: [0, 1)", 0.0),
    ],
)
async def test_structured_answers_are_graded_in_the_environments_own_grader(expected, response, reward):
    rt = runtime("math")
    try:
        sid = (await rt.seed({**ROW, "expected_answer": expected})).session_id
        result = await rt.verify(sid, VerifyRequest(response=response))
        assert result.reward == reward, (response, result)
        assert result.metrics["match"] == "math-verify"
    finally:
        await rt.env.aclose()  # the environment owns its grading workers and stops them
    assert rt.env.grader._pool is None


@pytest.mark.parametrize(
    "question, expected, restated",
    [
        ("Compute (12 + 34) * 5 - 10.", "220", "(12 + 34) * 5 - 10"),
        ("What is 5/3 + 5/12? Give the result as a fraction in lowest terms.", "25/12", "5/3 + 5/12"),
        ("Expand (x + 3)(x - 1) and write the result as a polynomial in x.", "x^2 + 2x - 3", "(x + 3)(x - 1)"),
    ],
)
async def test_the_questions_own_expression_as_the_answer_earns_nothing(question, expected, restated):
    # Equal to the expected answer, but the work the question asks for is not done: a policy that
    # copies the expression into its answer line must not be paid (audit probe question_expression).
    rt = runtime("math")
    try:
        row = {"responses_create_params": {"input": question}, "env": "math", "expected_answer": expected}
        for response, reward in ((f"Answer: {restated}", 0.0), (f"Answer: {expected}", 1.0)):
            sid = (await rt.seed(row)).session_id
            result = await rt.verify(sid, VerifyRequest(response=response))
            assert result.reward == reward, (response, result)
            assert result.metrics["match"].startswith("form: ") == (reward == 0.0), result.metrics
    finally:
        await rt.env.aclose()


@pytest.mark.parametrize(
    "response, reward, why, plain",
    [
        ("5/3 + 5/12 = 25/12\nAnswer: 25/12", 1.0, None, 1.0),
        ("The sum is \\boxed{\\frac{25}{12}}.", 1.0, None, 1.0),
        ("Answer: 2.0833333333", 0.0, "not a fraction in lowest terms", 1.0),  # the calculator's decimal
        ("Answer: 50/24", 0.0, "not in lowest terms: 50/24", 1.0),
        ("Answer: 26/12", 0.0, "not in lowest terms: 26/12", 0.0),  # reducible and wrong: the form is named
        ("Answer: 13/6", 0.0, None, 0.0),  # reduced, and wrong
    ],
)
async def test_a_row_that_asks_for_lowest_terms_pays_only_a_reduced_fraction(response, reward, why, plain):
    """`answer_form: lowest_terms` (the generator's fractions questions set it): the calculator's
    decimal for 5/3 + 5/12 is equal to 25/12 but skips the reducing the task is about."""
    rt = runtime("math")
    question = "What is 5/3 + 5/12? Give the result as a fraction in lowest terms."
    row = {"responses_create_params": {"input": question}, "expected_answer": "25/12", "answer_form": "lowest_terms"}
    sid = (await rt.seed(row)).session_id
    result = await rt.verify(sid, VerifyRequest(response=response))
    assert result.reward == reward, (response, result)
    assert result.metrics["match"].startswith(f"form: {why}") == (why is not None), result.metrics
    # the same answers without the field: graded by equivalence (and the value form) alone
    sid = (await rt.seed({k: v for k, v in row.items() if k != "answer_form"})).session_id
    result = await rt.verify(sid, VerifyRequest(response=response))
    assert result.reward == plain, (response, result)


async def test_an_unknown_answer_form_is_a_bad_request_naming_the_field():
    rt = runtime("math")
    with pytest.raises(BadRequest) as exc:
        await rt.seed({"responses_create_params": {"input": "q"}, "expected_answer": "1/2", "answer_form": "decimal"})
    assert "answer_form" in str(exc.value)


def test_the_generators_fractions_questions_ask_for_lowest_terms_and_their_gold_answers_are():
    from rollgate.resources_servers.envs.math_env import example_tasks
    from rollgate.verifiers.answer_form import asked_form_mismatch

    rows = example_tasks(70, seed=3)
    fractions = [r for r in rows if r["category"] == "fractions"]
    assert fractions and all(r["answer_form"] == "lowest_terms" for r in fractions)
    assert all("answer_form" not in r for r in rows if r["category"] != "fractions")
    assert all(asked_form_mismatch(r["expected_answer"], "lowest_terms") is None for r in fractions)
