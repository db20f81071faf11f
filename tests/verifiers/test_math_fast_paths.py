"""The shortcuts on the per-rollout path (plain integers skip Python's parser, constant answers
compare without sympy or a worker thread) give exactly what the full path gives."""

from __future__ import annotations

import ast
import random
import warnings

import pytest

from rollgate.core.schemas import VerifyRequest
from rollgate.verifiers.math_equiv import _compare, check_equivalence, constant_equivalence
from rollgate.verifiers.mathexpr import ExprError, parse, to_python_syntax
from tests.envs.gold import runtime


def _full_parse(text: str, latex: bool) -> str:
    """What parse() built before the shortcut: Python's parser on the rewritten text."""
    src = to_python_syntax(text) if latex else text.strip()
    return ast.dump(ast.parse(src, mode="eval").body)


def _outcome(fn, *args, **kwargs):
    try:
        out = fn(*args, **kwargs)
    except ExprError as exc:
        return ("error", str(exc))
    return ("ok", ast.dump(out) if isinstance(out, ast.AST) else out)


@pytest.mark.parametrize("text", ["0", "42", " 7 ", "$12$", "42%", "1234567890123"])
@pytest.mark.parametrize("latex", [False, True])
def test_plain_integers_parse_to_the_same_tree_as_the_parser_builds(text, latex):
    try:
        expected = ("ok", _full_parse(text, latex))
    except SyntaxError:
        expected = None
    got = _outcome(parse, text, symbols=True, latex=latex)
    if expected is None:
        assert got[0] == "error"
    else:
        assert got == expected


@pytest.mark.parametrize("text", ["007", "٤٢", "1_000", "-5", "4 2", "1e3"])
def test_almost_integers_take_the_full_parser(text):
    """Leading zeros, non-ASCII digits, underscores and signs are not the shortcut's business."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        try:
            expected = ("ok", _full_parse(text, latex=True))
        except SyntaxError:
            expected = None
        got = _outcome(parse, text, symbols=True, latex=True)
    assert got[0] == ("error" if expected is None else "ok")
    if expected is not None:
        assert got == expected


@pytest.mark.parametrize(
    "latex, python",
    [
        ("\\frac{1}{2}", "((1)/(2))"),
        ("\\dfrac{\\sqrt{2}}{2}", "((sqrt(2))/(2))"),
        ("1,234,567", "1234567"),
        ("2x", "2*x"),
        ("3\\cdot 4", "3* 4"),
        ("$42$", "42"),
        ("x^2", "x**2"),
        ("50%", "50"),
    ],
)
def test_rewrites_still_apply_around_the_shortcuts(latex, python):
    assert to_python_syntax(latex) == python


@pytest.mark.parametrize(
    "given, expected, result",
    [
        ("42", "42", (True, "exact")),
        ("41", "42", (False, "exact")),
        ("3/4", "0.75", (True, "numeric")),
        ("1,000", "1000", (True, "exact")),
        ("\\frac{5}{4}", "5/4", (True, "exact")),
    ],
)
def test_constant_answers_compare_without_sympy(given, expected, result):
    eq = constant_equivalence(given, expected)
    assert (eq.equal, eq.reason) == result
    assert check_equivalence(given, expected) == eq == _compare(given, expected, 1e-6, 1e-9)


@pytest.mark.parametrize("given, expected", [("x+1", "1+x"), ("2*x", "x+x"), ("x", "2")])
def test_answers_with_symbols_are_left_to_sympy(given, expected, grader):
    assert constant_equivalence(given, expected) is None
    assert check_equivalence(given, expected, grader=grader).reason in ("symbolic", "numeric", "mismatch")


def test_random_integer_answers_grade_like_the_full_comparison():
    rng = random.Random(7)
    for _ in range(300):
        a, b = str(rng.randint(0, 50)), str(rng.randint(0, 50))
        assert constant_equivalence(a, b).equal is (int(a) == int(b))


@pytest.mark.parametrize(
    "expected, response, reward, match",
    [
        ("5/4", "Answer: 5/4", 1.0, "exact"),
        ("5/4", "Answer: 1.25", 1.0, "numeric"),
        ("5/4", "Answer: 2", 0.0, "exact"),
        # a symbol for a number: refused by its form before any comparison
        (
            "5/4",
            "Answer: x",
            0.0,
            "form: not a value: the answer must be a number or a fraction, not an expression to evaluate",
        ),
        # symbols: graded by the sympy path on a worker thread
        ("x^2 + 2x - 3", "Answer: 2x + x^2 - 3", 1.0, "symbolic"),
        ("x^2 + 2x - 3", "Answer: x^2 + 2x - 4", 0.0, "mismatch"),
    ],
)
async def test_math_env_grades_inline_and_sympy_answers_alike(expected, response, reward, match):
    rt = runtime("math")
    sid = (
        await rt.seed({"responses_create_params": {"input": "?"}, "env": "math", "expected_answer": expected})
    ).session_id
    out = await rt.verify(sid, VerifyRequest(response=response))
    assert out.reward == reward
    assert out.metrics["match"] == match
