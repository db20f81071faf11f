"""Safe math expressions: parsed with `ast` against a whitelist, never `eval`.

One checked tree serves two consumers: numeric evaluation (the math environment's calculator)
and sympy construction (the verifier's equivalence check). Sympy is built from the checked tree
directly, because sympy's own string parser calls `eval` on its input.

Bounds keep hostile input cheap: text length, node count, exponent size and result size
(`9**9**9` is an `ExprError`, not a hang).
"""

from __future__ import annotations

import ast
import math
import re
from fractions import Fraction
from typing import Any

MAX_TEXT = 500
MAX_NODES = 200
MAX_EXPONENT = 1000
MAX_BITS = 4096  # largest integer (or fraction part) a result may hold

Number = int | Fraction | float


class ExprError(ValueError):
    """The text is not an allowed expression, or evaluating it would exceed a bound."""


_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
_UNARY = (ast.USub, ast.UAdd)
# Numeric functions of the calculator; name -> (min args, max args).
FUNCTIONS: dict[str, tuple[int, int]] = {
    "sqrt": (1, 1),
    "abs": (1, 1),
    "round": (1, 2),
    "floor": (1, 1),
    "ceil": (1, 1),
    "min": (1, 8),
    "max": (1, 8),
    "log": (1, 2),
    "exp": (1, 1),
}
CONSTANTS = {"pi": math.pi, "e": math.e}


_FRAC_ALIAS = re.compile(r"\\[dt]?frac")
_FRAC = re.compile(r"\\frac\{([^{}]*)\}\{([^{}]*)\}")
_SQRT = re.compile(r"\\sqrt\{([^{}]*)\}")
_THOUSANDS = re.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+)(?![\d,])")
_IMPLICIT_NUM = re.compile(r"(\d)\s*(?=[a-df-zA-Z(]|e(?![\d+-]))")
_IMPLICIT_PAREN = re.compile(r"\)\s*(?=[(\w])")
# A bare non-negative decimal integer: every rewrite below leaves it unchanged, and it parses to
# one Constant (leading zeros excluded: Python's parser rejects `007`).
_PLAIN_INT = re.compile(r"(?:0|[1-9][0-9]*)")


def to_python_syntax(text: str) -> str:
    """Rewrite common answer notation (LaTeX-lite, ^, thousands separators) into Python syntax."""
    s = text.strip().strip("$").strip()
    if _PLAIN_INT.fullmatch(s):
        return s  # the common answer: nothing to rewrite
    if "\\" in s:  # the LaTeX rewrites only apply to text with a backslash
        s = s.replace("\\left", "").replace("\\right", "").replace("\\!", "").replace("\\,", "")
        s = _FRAC_ALIAS.sub(r"\\frac", s)
        for _ in range(10):  # innermost-first, so nested \frac{\sqrt{2}}{2} unfolds
            new = _FRAC.sub(r"((\1)/(\2))", s)
            new = _SQRT.sub(r"sqrt(\1)", new)
            if new == s:
                break
            s = new
        s = s.replace("\\cdot", "*").replace("\\times", "*").replace("\\div", "/").replace("\\pi", "pi")
    s = s.replace("^", "**").replace("−", "-").replace("×", "*").replace("÷", "/")
    if "," in s:
        s = _THOUSANDS.sub(lambda m: m.group(1).replace(",", ""), s)
    s = s.rstrip("%").strip()
    # Implicit multiplication: 2x, 2(x+1), 3pi, )( -- but not scientific notation like 1e5.
    s = _IMPLICIT_NUM.sub(r"\1*", s)
    s = _IMPLICIT_PAREN.sub(")*", s)
    return s


def parse(text: str, *, symbols: bool = False, latex: bool = False) -> ast.expr:
    """Parse and check an expression. `symbols` allows single-letter variables (for answers)."""
    if not isinstance(text, str):
        raise ExprError("expression must be a string")
    if len(text) > MAX_TEXT:
        raise ExprError(f"expression longer than {MAX_TEXT} characters")
    src = to_python_syntax(text) if latex else text.strip()
    if not src:
        raise ExprError("empty expression")
    if _PLAIN_INT.fullmatch(src):
        return ast.Constant(int(src))  # what ast.parse would build, without the parser and the walk
    try:
        tree = ast.parse(src, mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"not a valid expression ({exc.msg})") from None
    for count, node in enumerate(ast.walk(tree), start=1):
        if count > MAX_NODES:
            raise ExprError(f"expression has more than {MAX_NODES} parts")
        _check_node(node, symbols)
    return tree.body


def _check_node(node: ast.AST, symbols: bool) -> None:
    if isinstance(node, (ast.Expression, ast.Load, _BINOPS + _UNARY)):
        return
    if isinstance(node, ast.BinOp):
        if not isinstance(node.op, _BINOPS):
            raise ExprError(f"operator {type(node.op).__name__} is not allowed")
        return
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, _UNARY):
            raise ExprError(f"operator {type(node.op).__name__} is not allowed")
        return
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ExprError(f"only numbers are allowed, not {node.value!r}")
        return
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS or node.id in FUNCTIONS:
            return
        if symbols and len(node.id) == 1 and node.id.isalpha():
            return
        raise ExprError(f"unknown name {node.id!r}")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            raise ExprError("only the functions " + ", ".join(FUNCTIONS) + " may be called")
        if node.keywords:
            raise ExprError("keyword arguments are not allowed")
        lo, hi = FUNCTIONS[node.func.id]
        if not lo <= len(node.args) <= hi:
            raise ExprError(f"{node.func.id} takes {lo}..{hi} arguments")
        return
    raise ExprError(f"{type(node).__name__} is not allowed in an expression")


# --- numeric evaluation ---------------------------------------------------------------------


def _bounded(v: Number) -> Number:
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ExprError("result is not a finite number")
        return v
    if isinstance(v, Fraction):
        if v.numerator.bit_length() > MAX_BITS or v.denominator.bit_length() > MAX_BITS:
            raise ExprError("result is too large")
        return v.numerator if v.denominator == 1 else v
    if v.bit_length() > MAX_BITS:
        raise ExprError("result is too large")
    return v


def _pow(base: Number, exp: Number) -> Number:
    if isinstance(exp, Fraction) and exp.denominator == 1:
        exp = exp.numerator
    if isinstance(exp, int):
        if abs(exp) > MAX_EXPONENT:
            raise ExprError(f"exponent {exp} is larger than {MAX_EXPONENT}")
        if isinstance(base, (int, Fraction)):
            size = max(Fraction(base).numerator.bit_length(), Fraction(base).denominator.bit_length())
            if size * abs(exp) > MAX_BITS:
                raise ExprError("result is too large")
            if base == 0 and exp < 0:
                raise ExprError("division by zero")
            return Fraction(base) ** exp
    try:
        result = float(base) ** float(exp)
    except OverflowError:
        raise ExprError("result is too large") from None
    except ZeroDivisionError:
        raise ExprError("division by zero") from None
    if isinstance(result, complex):
        raise ExprError("result is not a real number")
    return result


def _call(name: str, args: list[Number]) -> Number:
    try:
        if name == "sqrt":
            if args[0] < 0:
                raise ExprError("sqrt of a negative number")
            root = math.isqrt(args[0]) if isinstance(args[0], int) else None
            return root if root is not None and root * root == args[0] else math.sqrt(args[0])
        if name == "abs":
            return abs(args[0])
        if name == "round":
            return round(args[0], int(args[1])) if len(args) == 2 else round(args[0])
        if name == "floor":
            return math.floor(args[0])
        if name == "ceil":
            return math.ceil(args[0])
        if name == "min":
            return min(args)
        if name == "max":
            return max(args)
        if name == "log":
            return math.log(args[0], args[1]) if len(args) == 2 else math.log(args[0])
        if name == "exp":
            return math.exp(args[0])
    except (ValueError, OverflowError, ZeroDivisionError) as exc:
        raise ExprError(f"{name}: {exc}") from None
    raise ExprError(f"unknown function {name!r}")


def _eval(node: ast.expr) -> Number:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        raise ExprError(f"unknown name {node.id!r}")
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.Call):
        return _bounded(_call(node.func.id, [_eval(a) for a in node.args]))  # type: ignore[attr-defined]
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left), _eval(node.right)
        op = node.op
        try:
            if isinstance(op, ast.Add):
                r = a + b
            elif isinstance(op, ast.Sub):
                r = a - b
            elif isinstance(op, ast.Mult):
                r = a * b
            elif isinstance(op, ast.Div):
                r = Fraction(a) / Fraction(b) if not isinstance(a, float) and not isinstance(b, float) else a / b
            elif isinstance(op, ast.FloorDiv):
                r = a // b
            elif isinstance(op, ast.Mod):
                r = a % b
            else:
                r = _pow(a, b)
        except ZeroDivisionError:
            raise ExprError("division by zero") from None
        except OverflowError as exc:
            raise ExprError(f"result is too large ({exc})") from None
        return _bounded(r)
    raise ExprError(f"{type(node).__name__} is not allowed")


def evaluate(text: str) -> Number:
    """Evaluate an arithmetic expression exactly where possible (ints and fractions)."""
    return _bounded(_eval(parse(text)))


def format_number(v: Number) -> str:
    """A readable result: integers exactly, everything else to 12 significant digits."""
    if isinstance(v, Fraction):
        v = v.numerator if v.denominator == 1 else float(v)
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    if isinstance(v, float):
        return f"{v:.12g}"
    return str(v)


# --- sympy construction ----------------------------------------------------------------------


def to_sympy(node: ast.expr) -> Any:
    """Build a sympy expression from a checked tree (never from text)."""
    import sympy

    if isinstance(node, ast.Constant):
        return sympy.Integer(node.value) if isinstance(node.value, int) else sympy.Rational(repr(node.value))
    if isinstance(node, ast.Name):
        if node.id == "pi":
            return sympy.pi
        if node.id == "e":
            return sympy.E
        return sympy.Symbol(node.id)
    if isinstance(node, ast.UnaryOp):
        v = to_sympy(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.Call):
        name = node.func.id  # type: ignore[attr-defined]
        args = [to_sympy(a) for a in node.args]
        table = {
            "sqrt": sympy.sqrt,
            "abs": sympy.Abs,
            "floor": sympy.floor,
            "ceil": sympy.ceiling,
            "exp": sympy.exp,
            "min": sympy.Min,
            "max": sympy.Max,
            "log": lambda x, b=None: sympy.log(x) if b is None else sympy.log(x, b),
        }
        if name not in table:
            raise ExprError(f"{name} is not supported in answers")
        return table[name](*args)
    if isinstance(node, ast.BinOp):
        a, b = to_sympy(node.left), to_sympy(node.right)
        op = node.op
        if isinstance(op, ast.Add):
            return a + b
        if isinstance(op, ast.Sub):
            return a - b
        if isinstance(op, ast.Mult):
            return a * b
        if isinstance(op, ast.Div):
            return a / b
        if isinstance(op, ast.FloorDiv):
            return sympy.floor(a / b)
        if isinstance(op, ast.Mod):
            return sympy.Mod(a, b)
        if b.is_number and (abs(b) > MAX_EXPONENT) is sympy.true:
            raise ExprError(f"exponent larger than {MAX_EXPONENT}")
        return a**b
    raise ExprError(f"{type(node).__name__} is not allowed")
