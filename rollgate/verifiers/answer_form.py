"""Is a final answer written in the form its task asks for, not only equal to it?

Equivalence alone pays an answer that restates the question: `Answer: (12 + 34) * 5 - 10` equals
`220`, `Answer: 5/3 + 5/12` equals `25/12`, and `Answer: (x + 3)(x - 1)` equals `x^2 + 2x - 3` at
every sample point, so a policy that copies the question's expression into its answer line would
be paid for work it never did (`rollgate audit`'s `question_expression` probe). The form is read
off the expected answer:

- a number or a fraction (`220`, `-3.5`, `25/12`, `\\frac{25}{12}`): the answer must be a
  value too (a number, a decimal or a fraction), not an expression to evaluate;
- an expanded polynomial in one variable (`x^2 + 2x - 3`): one, each power of the variable once.

Any other expected answer (`2*sqrt(3)`, sets, intervals) sets no form, and an answer the grammar
cannot read (`18 dollars`) is left to the equivalence check, which reads it its own way.

A task can also ask for a form by name (a math row's `answer_form`), which the expected answer
alone cannot say: a row expecting `5/4` may well accept `1.25`, but one whose question asks for "a
fraction in lowest terms" pays neither `1.25` (the calculator's decimal, which skips the reducing
the task is about) nor `10/8` (`asked_form_mismatch`).
"""

from __future__ import annotations

import ast
from math import gcd
from typing import Literal, get_args

from rollgate.verifiers.math_equiv import strip_lhs
from rollgate.verifiers.mathexpr import ExprError, parse


def _tree(text: str) -> ast.expr | None:
    try:
        return parse(strip_lhs(text), symbols=True, latex=True)
    except ExprError:
        return None


def _unsigned(node: ast.expr) -> ast.expr:
    return node.operand if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) else node


def _number(node: ast.expr) -> bool:
    """A literal: 220, -3.5 (bool is not a number here)."""
    n = _unsigned(node)
    return isinstance(n, ast.Constant) and type(n.value) in (int, float)


def _fraction(node: ast.expr) -> tuple[int, int] | None:
    """(numerator, denominator) of a literal fraction, signs dropped: 25/12, -25/12, (-25)/12."""
    n = _unsigned(node)
    if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
        top, bottom = _unsigned(n.left), n.right
        if all(isinstance(v, ast.Constant) and type(v.value) is int for v in (top, bottom)):
            return top.value, bottom.value
    return None


def _value(node: ast.expr) -> bool:
    """A number or a literal fraction: what a task whose answer is a value asks for."""
    return _number(node) or _fraction(node) is not None


def _terms(node: ast.expr) -> list[ast.expr]:
    """The summands of a + b - c (signs dropped: only each term's shape matters)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return [*_terms(node.left), _unsigned(node.right)]
    return [_unsigned(node)]


def _power(term: ast.expr) -> tuple[str, int] | None:
    """(variable, exponent) of x, x**2, 3*x, 3*x**2 (coefficient a literal); ("", 0) for a number."""
    if _value(term):
        return "", 0
    if isinstance(term, ast.BinOp) and isinstance(term.op, ast.Mult) and _value(term.left):
        term = term.right
    if isinstance(term, ast.Name):
        return term.id, 1
    if isinstance(term, ast.BinOp) and isinstance(term.op, ast.Pow) and isinstance(term.left, ast.Name):
        exp = term.right
        if isinstance(exp, ast.Constant) and type(exp.value) is int and exp.value >= 2:
            return term.left.id, exp.value
    return None


def _polynomial(node: ast.expr) -> bool:
    """An expanded polynomial in one variable: literal-coefficient terms, each power once."""
    powers = [_power(t) for t in _terms(node)]
    if any(p is None for p in powers):
        return False
    variables = {v for v, _ in powers if v}
    exponents = [e for _, e in powers]
    return len(variables) == 1 and len(exponents) == len(set(exponents))


def form_mismatch(given: str, expected: str) -> str | None:
    """Why `given` is not written in the form `expected` sets, or None (the form is right, the
    expected answer sets none, or `given` is left to the equivalence check)."""
    want, got = _tree(expected), _tree(given)
    if want is None or got is None:
        return None
    if _value(want):
        if _value(got):
            return None
        return "not a value: the answer must be a number or a fraction, not an expression to evaluate"
    if _polynomial(want) and not _polynomial(got):
        return "not an expanded polynomial"
    return None


AskedForm = Literal["lowest_terms"]  # a math row's `answer_form` (MathRow publishes the choices)
ASKED_FORMS: tuple[str, ...] = get_args(AskedForm)
LOWEST_TERMS: AskedForm = "lowest_terms"  # an integer, or a fraction p/q with no common factor


_NOT_LOWEST_TERMS = "not a fraction in lowest terms: the task asks for one (a decimal or an expression is not)"


def asked_form_mismatch(given: str, form: str) -> str | None:
    """Why `given` is not in the form a task asks for by name (one of ASKED_FORMS), or None."""
    if form != LOWEST_TERMS:
        raise ValueError(f"unknown answer form {form!r}; known: {', '.join(ASKED_FORMS)}")
    tree = _tree(given)
    if tree is None:
        return _NOT_LOWEST_TERMS
    if _number(tree) and type(_unsigned(tree).value) is int:
        return None
    if (parts := _fraction(tree)) is None:
        return _NOT_LOWEST_TERMS
    p, q = parts
    if q == 0:
        return "not a fraction: its denominator is 0"
    if gcd(p, q) != 1 or q == 1:
        return f"not in lowest terms: {p}/{q} can be reduced"
    return None
