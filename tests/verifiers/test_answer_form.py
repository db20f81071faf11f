"""An answer must be written in the form its expected answer has: a value for a value, an expanded
polynomial for one. Equivalence alone pays the question's own expression restated."""

from __future__ import annotations

import pytest

from rollgate.verifiers.answer_form import LOWEST_TERMS, asked_form_mismatch, form_mismatch


@pytest.mark.parametrize(
    "given, expected",
    [
        ("220", "220"),
        ("220.0", "220"),
        ("-3.5", "-3.5"),
        ("x = 220", "220"),
        ("25/12", "25/12"),
        ("\\frac{25}{12}", "25/12"),
        ("-25/12", "-25/12"),
        ("1.25", "5/4"),  # a decimal is a value: equivalence decides whether it is the right one
        ("3/4", "0.75"),
        ("7", "5/4"),  # the right form, the wrong value: equivalence says no
        ("x^2 + 2x - 3", "x^2 + 2x - 3"),
        ("2x + x^2 - 3", "x^2 + 2x - 3"),
        ("-x^2 + 9", "x^2 - 9"),
        ("18 dollars", "18"),  # not in the grammar: left to the equivalence check
        ("sqrt(12)", "2*sqrt(3)"),  # an expected answer that is itself an expression sets no form
    ],
)
def test_answers_in_the_expected_form_pass(given, expected):
    assert form_mismatch(given, expected) is None


@pytest.mark.parametrize(
    "given, expected, reason",
    [
        ("(12 + 34) * 5 - 10", "220", "not a value"),
        ("440 * 1 / 2", "220", "not a value"),
        ("5/3 + 5/12", "25/12", "not a value"),
        ("sqrt(4)", "2", "not a value"),
        ("(x + 3)(x - 1)", "x^2 + 2x - 3", "not an expanded polynomial"),
        ("x^2 + (3 - 1)x - 3", "x^2 + 2x - 3", "not an expanded polynomial"),
        ("x^2 + x + x - 3", "x^2 + 2x - 3", "not an expanded polynomial"),
        ("x*(x + 2) - 3", "x^2 + 2x - 3", "not an expanded polynomial"),
    ],
)
def test_the_questions_expression_restated_is_refused_with_the_reason(given, expected, reason):
    assert reason in (form_mismatch(given, expected) or "")


@pytest.mark.parametrize(
    "given, reason",
    [
        ("25/12", None),
        ("-25/12", None),
        ("\\frac{25}{12}", None),
        ("2", None),
        ("50/24", "not in lowest terms: 50/24 can be reduced"),
        ("\\frac{50}{24}", "not in lowest terms: 50/24 can be reduced"),
        ("4/1", "not in lowest terms: 4/1 can be reduced"),
        ("3/0", "not a fraction: its denominator is 0"),
        ("2.0833333333", "not a fraction in lowest terms"),
        ("5/3 + 5/12", "not a fraction in lowest terms"),
        ("x/2", "not a fraction in lowest terms"),
        ("25/12 dollars", "not a fraction in lowest terms"),
    ],
)
def test_lowest_terms_asks_for_an_integer_or_a_reduced_fraction(given, reason):
    got = asked_form_mismatch(given, LOWEST_TERMS)
    assert got == reason if reason is None else got.startswith(reason), got


def test_an_unknown_asked_form_is_an_error():
    with pytest.raises(ValueError, match="lowest_terms"):
        asked_form_mismatch("1/2", "decimal")
