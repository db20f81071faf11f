"""Numeric and symbolic equivalence of math answers (sympy), with size and time guards.

Both sides go through `mathexpr.parse` (whitelist, length and size bounds) and are built into
sympy from the checked tree. Constant answers compare numerically with a relative tolerance;
answers with variables compare at fixed sample points (deterministic, and cheaper than
`simplify`, which can take unbounded time). Two constant answers skip sympy: the exact evaluator
of mathexpr compares them. Answers that grammar cannot read (sets, intervals, matrices, `\\text`)
go to Hugging Face's math-verify. Comparisons that need sympy run in the worker processes of a
`MathGrader` (math_grader.py), under a time limit measured inside the worker.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

# Imported here, not inside the timed comparison: a first sympy import takes seconds and must
# never count against an answer's time budget.
import sympy

from rollgate.verifiers.mathexpr import ExprError, evaluate, parse, to_python_syntax, to_sympy

if TYPE_CHECKING:
    from rollgate.verifiers.math_grader import MathGrader

log = logging.getLogger("rollgate.verifiers")

# Sample points for expressions with variables: odd rationals avoid removable singularities
# (x=0, x=1) that make unequal expressions look equal.
_SAMPLES = [(0.37, 1.91, -2.3), (1.73, -0.61, 2.9), (-1.17, 2.47, 0.53), (2.21, 0.83, -1.39)]


@dataclass(frozen=True)
class Equivalence:
    equal: bool
    reason: str  # "numeric", "symbolic", "unparseable", "timeout", "mismatch", ...


def strip_lhs(text: str) -> str:
    """ "x = 5" -> "5": an answer written as an equation is graded by its right-hand side."""
    return text.rsplit("=", 1)[-1] if re.match(r"^\s*[A-Za-z]\w*\s*=", text) else text


def _close(a: complex, b: complex, rel_tol: float, abs_tol: float) -> bool:
    return abs(a - b) <= max(abs_tol, rel_tol * max(abs(a), abs(b)))


def _numeric(text: str) -> int | Fraction | float | None:
    """The value of a constant answer by the exact evaluator (no sympy), or None."""
    try:
        return evaluate(to_python_syntax(strip_lhs(text)))
    except ExprError:
        return None


def constant_equivalence(
    given: str, expected: str, *, rel_tol: float = 1e-6, abs_tol: float = 1e-9
) -> Equivalence | None:
    """Two constant answers compared exactly (fractions) or within tolerance (floats), without
    sympy; None when either side is not a constant. mathexpr's bounds keep it cheap (the
    calculator runs the same evaluator inline), so callers may run it on the event loop."""
    a_num, b_num = _numeric(given), _numeric(expected)
    if a_num is None or b_num is None:
        return None
    if isinstance(a_num, float) or isinstance(b_num, float):
        return Equivalence(_close(float(a_num), float(b_num), rel_tol, abs_tol), "numeric")
    return Equivalence(a_num == b_num, "exact")


def _compare(given: str, expected: str, rel_tol: float, abs_tol: float) -> Equivalence:
    fast = constant_equivalence(given, expected, rel_tol=rel_tol, abs_tol=abs_tol)
    if fast is not None:
        return fast
    try:
        want = to_sympy(parse(strip_lhs(expected), symbols=True, latex=True))
    except ExprError as exc:
        return _by_math_verify(given, expected, f"expected answer {expected!r} is not a valid expression: {exc}")
    try:
        got = to_sympy(parse(strip_lhs(given), symbols=True, latex=True))
    except (ExprError, TypeError, ValueError, ZeroDivisionError) as exc:
        eq = _by_math_verify(given, expected, None)
        return eq if eq.equal else Equivalence(False, f"unparseable: {exc}")
    free = sorted(got.free_symbols | want.free_symbols, key=lambda s: s.name)
    if not free:
        try:
            a, b = complex(sympy.N(got, 30)), complex(sympy.N(want, 30))
        except (TypeError, ValueError, OverflowError):
            return Equivalence(False, "not a number")
        return Equivalence(_close(a, b, rel_tol, abs_tol), "numeric")
    if len(free) > len(_SAMPLES[0]):
        return Equivalence(False, "too many variables")
    for point in _SAMPLES:
        subs = dict(zip(free, point, strict=False))  # a sample point has spare coordinates
        try:
            a, b = complex(sympy.N(got.subs(subs), 30)), complex(sympy.N(want.subs(subs), 30))
        except (TypeError, ValueError, OverflowError):
            return Equivalence(False, "not a number at a sample point")
        if not _close(a, b, rel_tol, abs_tol):
            return Equivalence(False, "mismatch")
    return Equivalence(True, "symbolic")


# What only math-verify reads: sets, intervals and tuples, matrices, \\text, unions, infinity.
_STRUCTURED = re.compile(r"\\[{}]|\\text|\\mathrm|\\begin|\\cup|\\cap|\\infty|[\[(].*,.*[\])]")


def looks_structured(text: str) -> bool:
    """Does this answer hold a structure only math-verify reads (a cheap syntactic check)?"""
    return bool(_STRUCTURED.search(text))


def _by_math_verify(given: str, expected: str, expected_error: str | None) -> Equivalence:
    """Sets, intervals, matrices and `\\text` answers, which mathexpr's grammar does not read, by
    math-verify. Only the first expression of each side counts: a reply that lists many candidates
    must not match by one of them. `expected_error` is raised when math-verify cannot read the
    expected answer either (bad data, not a wrong answer). Its own signal-based timeouts are off:
    the grader's worker bounds the whole comparison."""
    from math_verify import parse as mv_parse
    from math_verify import verify as mv_verify

    def first(text: str) -> object | None:
        found = mv_parse(f"${text}$", extraction_mode="first_match", parsing_timeout=None)  # type: ignore[arg-type]
        return found[0] if found else None

    if not looks_structured(expected):
        # math-verify reads almost any text as a product of symbols: an expected answer that is not
        # a structure mathexpr lacks (set, interval, tuple, matrix, text) is bad data, not a set
        if expected_error is not None:
            raise ValueError(expected_error)
        return Equivalence(False, "unparseable")
    want = first(expected)
    if want is None:
        if expected_error is not None:
            raise ValueError(expected_error)
        return Equivalence(False, "unparseable by math-verify")
    got = first(given)
    if got is None:
        return Equivalence(False, "unparseable by math-verify")
    return Equivalence(bool(mv_verify(want, got, timeout_seconds=None)), "math-verify")


def check_equivalence(
    given: str,
    expected: str,
    *,
    rel_tol: float = 1e-6,
    abs_tol: float = 1e-9,
    timeout_s: float = 5.0,
    grader: MathGrader | None = None,
) -> Equivalence:
    """Compare an answer with the expected one. A malformed `expected` is a ValueError (bad data);
    a malformed `given` is simply not equal. Pass the `MathGrader` of the caller (an environment
    owns one) to reuse its worker processes; without one, a grader is made for this call."""
    fast = constant_equivalence(given, expected, rel_tol=rel_tol, abs_tol=abs_tol)
    if fast is not None:
        return fast  # no sympy: no worker (a hand-off costs more than the comparison)
    if grader is not None:
        return grader.compare(given, expected, rel_tol=rel_tol, abs_tol=abs_tol)
    from rollgate.verifiers.math_grader import MathGrader

    with MathGrader(workers=1, timeout_s=timeout_s) as own:
        return own.compare(given, expected, rel_tol=rel_tol, abs_tol=abs_tol)


def math_equivalent(given: str | None, expected: str, **kwargs) -> bool:
    if given is None:
        return False
    return check_equivalence(given, expected, **kwargs).equal
