"""Final-answer extraction, the safe expression parser and math equivalence."""

from __future__ import annotations

import time

import pytest

from rollgate.verifiers.answers import extract_boxed, extract_final_answer
from rollgate.verifiers.math_equiv import check_equivalence, math_equivalent
from rollgate.verifiers.mathexpr import ExprError, evaluate, parse, to_python_syntax


@pytest.mark.parametrize(
    "text,answer",
    [
        ("so \\boxed{\\frac{1}{2}} and later \\boxed{3}", "3"),
        ("nested \\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{\\sqrt{2}}{2}"),
        ("Work...\nAnswer: 42", "42"),
        ("Work...\n**Final answer:** 7/8.", "7/8"),
        ("Answer: 1\nwait, no.\nAnswer: 2", "2"),
        ("I got 3 apples and then 1,250 pears", "1,250"),
        ("the ratio is -3/4 overall", "-3/4"),
        ("no numbers here", None),
        ("", None),
    ],
)
def test_final_answer_extraction_rule(text, answer):
    assert extract_final_answer(text) == answer


def test_unbalanced_box_falls_back_to_other_rules():
    assert extract_boxed("\\boxed{12") is None
    assert extract_final_answer("\\boxed{12") == "12"


@pytest.mark.parametrize(
    "latex,python",
    [
        ("\\frac{3}{4}", "((3)/(4))"),
        ("2\\sqrt{2}", "2*sqrt(2)"),
        ("x^2 + 3x", "x**2 + 3*x"),
        ("1,234,567", "1234567"),
        ("$25\\%$".replace("\\%", "%"), "25"),
        ("3 \\times 4", "3 * 4"),
        ("1e5", "1e5"),
    ],
)
def test_answer_notation_becomes_python_syntax(latex, python):
    assert to_python_syntax(latex) == python


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os')",
        "a.b",
        "x if 1 else 2",
        "f'{1}'",
        "1 < 2",
        "[1]",
        "{}",
        "sqrt(x=1)",
        "max()",
        "True",
        "1j",
        "(" * 300 + "1" + ")" * 300,
    ],
)
def test_parser_rejects_everything_outside_the_whitelist(text):
    with pytest.raises(ExprError):
        parse(text)


def test_huge_powers_fail_fast_instead_of_hanging():
    t0 = time.monotonic()
    for text in ["9**9**9", "2**4097", "(10**400)**4", "999999999999**400"]:
        with pytest.raises(ExprError):
            evaluate(text)
    assert time.monotonic() - t0 < 0.5
    assert evaluate("2**100") == 1267650600228229401496703205376


@pytest.mark.parametrize(
    "given,expected,equal",
    [
        ("42", "42", True),
        ("42.0", "42", True),
        ("\\frac{6}{8}", "3/4", True),
        ("0.75", "3/4", True),
        ("1,000", "1000", True),
        ("x = 5", "5", True),
        ("2\\sqrt{2}", "sqrt(8)", True),
        ("\\pi", "3.14159265358979", True),
        ("2(x+1)", "2x + 2", True),
        ("(x+1)^2", "x^2 + 2x + 1", True),
        ("x^2 - 7x - 18", "(x+2)(x-9)", True),
        ("43", "42", False),
        ("0.7", "3/4", False),
        ("x^2", "2x", False),
        ("x + y", "x + 1", False),
        ("banana", "42", False),
        ("9**9**9", "1", False),
        ("", "1", False),
    ],
)
def test_math_equivalence(given, expected, equal, grader):
    assert math_equivalent(given, expected, grader=grader) is equal, check_equivalence(given, expected, grader=grader)


def test_a_malformed_expected_answer_is_a_data_error(grader):
    with pytest.raises(ValueError, match="expected answer"):
        check_equivalence("x**2", "import os", grader=grader)  # a symbolic answer forces the sympy path
    with pytest.raises(ValueError, match="expected answer"):
        check_equivalence("x**2", "import os")  # a grader of its own for one call: same contract


def test_none_is_never_equivalent():
    assert math_equivalent(None, "1") is False
