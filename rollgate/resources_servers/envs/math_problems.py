"""Problem generators of the math environment's example rows: each yields the question, the
expected answer (computed with the same safe evaluator the calculator uses), and a gold path."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from fractions import Fraction

from rollgate.verifiers.mathexpr import evaluate, format_number

NAMES = ["Maya", "Omar", "Lena", "Ravi", "Sofia", "Tom", "Aiko", "Jonas", "Priya", "Diego"]


@dataclass
class Problem:
    category: str
    question: str
    answer: str
    calls: list[str] = field(default_factory=list)  # calculator expressions of the gold path
    working: str = ""


def _calc(expr: str) -> str:
    return format_number(evaluate(expr))


def arithmetic(rng: random.Random) -> Problem:
    # d stays below a*b (>= 144) so the whole-number-part question never involves negatives.
    a, b, c, d = rng.randint(12, 99), rng.randint(12, 99), rng.randint(3, 19), rng.randint(10, 140)
    expr, question = rng.choice(
        [
            (f"({a} + {b}) * {c} - {d}", f"Compute ({a} + {b}) * {c} - {d}."),
            (f"{a} * {c} + {b} * {c} - {d}", f"Compute {a} * {c} + {b} * {c} - {d}."),
            (f"({a} * {b} - {d}) // {c}", f"What is the whole-number part of ({a} * {b} - {d}) / {c}?"),
        ]
    )
    ans = _calc(expr)
    return Problem("arithmetic", question, ans, [expr], f"{expr} = {ans}")


def fractions(rng: random.Random) -> Problem:
    a, b = rng.randint(1, 9), rng.randint(2, 12)
    c, d = rng.randint(1, 9), rng.randint(2, 12)
    total = Fraction(a, b) + Fraction(c, d)
    ans = str(total.numerator) if total.denominator == 1 else f"{total.numerator}/{total.denominator}"
    return Problem(
        "fractions",
        f"What is {a}/{b} + {c}/{d}? Give the result as a fraction in lowest terms.",
        ans,
        [f"{a}/{b} + {c}/{d}"],
        f"{a}/{b} + {c}/{d} = {ans}",
    )


def shopping(rng: random.Random) -> Problem:
    who = rng.choice(NAMES)
    p, q = rng.randint(2, 15), rng.randint(1, 6)
    n, m = rng.randint(2, 9), rng.randint(2, 12)
    expr = f"{n} * {p} + {m} * {q}"
    ans = _calc(expr)
    question = (
        f"A notebook costs ${p} and a pen costs ${q}. {who} buys {n} notebooks and {m} pens. "
        "How many dollars are spent in total?"
    )
    return Problem("word:shopping", question, ans, [expr], f"{n}*{p} + {m}*{q} = {ans} dollars")


def travel(rng: random.Random) -> Problem:
    v, t = rng.choice([40, 50, 60, 72, 80, 90]), rng.randint(2, 5)
    w, s = rng.choice([30, 45, 55, 65, 100]), rng.randint(1, 4)
    expr = f"{v} * {t} + {w} * {s}"
    ans = _calc(expr)
    question = (
        f"A train travels at {v} km/h for {t} hours, then at {w} km/h for {s} hours. "
        "How many kilometres does it travel in total?"
    )
    return Problem("word:travel", question, ans, [expr], f"{v}*{t} + {w}*{s} = {ans} km")


def discount(rng: random.Random) -> Problem:
    price, pct = rng.choice([40, 60, 80, 120, 150, 200, 250]), rng.choice([10, 15, 20, 25, 30, 35])
    expr = f"{price} * (100 - {pct}) / 100"
    ans = _calc(expr)
    question = f"A jacket costs ${price}. It is on sale for {pct}% off. What is the sale price in dollars?"
    return Problem("word:percent", question, ans, [expr], f"{price} * {100 - pct}% = {ans}")


def packing(rng: random.Random) -> Problem:
    who = rng.choice(NAMES)
    batches, per, sold, box = rng.randint(3, 8), rng.choice([12, 18, 24]), rng.randint(5, 30), rng.choice([4, 5, 6])
    expr = f"({batches} * {per} - {sold}) // {box}"
    ans = _calc(expr)
    question = (
        f"{who} bakes {batches} batches of {per} cookies and sells {sold} of them. "
        f"The rest are packed into boxes of {box}. How many boxes can be filled completely?"
    )
    return Problem(
        "word:packing",
        question,
        ans,
        [f"{batches} * {per} - {sold}", expr],
        f"{batches}*{per} - {sold} cookies left, {ans} full boxes",
    )


def expand(rng: random.Random) -> Problem:
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    coef, const = a - b, -a * b
    lin = "" if coef == 0 else (f" + {coef}x" if coef > 0 else f" - {-coef}x")
    ans = f"x^2{lin} - {-const}"
    return Problem(
        "algebra",
        f"Expand (x + {a})(x - {b}) and write the result as a polynomial in x.",
        ans,
        [],
        f"(x + {a})(x - {b}) = x^2 + ({a} - {b})x - {a * b}",
    )


GENERATORS = [arithmetic, fractions, shopping, travel, discount, packing, expand]


def generate(rng: random.Random, index: int) -> Problem:
    """The index-th problem: categories rotate so every file covers all of them."""
    return GENERATORS[index % len(GENERATORS)](rng)
