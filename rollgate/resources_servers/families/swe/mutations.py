"""Bug injection by AST: every site of a source file where one of five small mutations applies.

A mutation is a text splice at an AST node's position (line, UTF-8 column): `original` there is
replaced by `replacement`. Splicing text, not re-printing the tree, keeps the file's formatting and
comments, so the bug is one small edit; its reverse (`reverse()`) is the fix. Kinds:
- flip_comparison: `<` <-> `>=`, `>` <-> `<=`, `==` <-> `!=`, `in` <-> `not in`, `is` <-> `is not`
- off_by_one: an integer in arithmetic, a comparison, an index or a slice, +1 or -1
- removed_branch: an `if` block without `else` replaced by `pass`
- swapped_arguments: the first two positional arguments of a call, exchanged
- wrong_constant: `True` <-> `False`, or another integer in an assignment or a return
Enumeration is deterministic: the same file always gives the same mutations in the same order.
"""

from __future__ import annotations

import ast
import re
from typing import Literal

from pydantic import BaseModel, Field

from rollgate.core.errors import BadRequest

Kind = Literal["flip_comparison", "off_by_one", "removed_branch", "swapped_arguments", "wrong_constant"]
KINDS: tuple[str, ...] = ("flip_comparison", "off_by_one", "removed_branch", "swapped_arguments", "wrong_constant")

_FLIP = {
    ast.Lt: ("<", ">="),
    ast.GtE: (">=", "<"),
    ast.Gt: (">", "<="),
    ast.LtE: ("<=", ">"),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.In: (r"in", "not in"),
    ast.NotIn: (r"not\s+in", "in"),
    ast.Is: (r"is", "is not"),
    ast.IsNot: (r"is\s+not", "is"),
}
_MAX_BRANCH_STATEMENTS = 4


class Mutation(BaseModel):
    """One injected bug: at `path` line `line` (1-based), byte column `col`, `original` -> `replacement`."""

    path: str = Field(min_length=1)
    line: int = Field(ge=1)
    col: int = Field(ge=0)
    kind: Kind
    original: str = Field(min_length=1)
    replacement: str = Field(min_length=1)

    @property
    def id(self) -> str:
        return f"{self.kind}@{self.path}:{self.line}:{self.col}:{self.replacement}"

    def reverse(self) -> Mutation:
        return self.model_copy(update={"original": self.replacement, "replacement": self.original})


class MutationError(BadRequest):
    def __init__(self, message: str):
        super().__init__(message, component="env:swe", field="mutation")


def apply(source: str, m: Mutation) -> str:
    """`source` with the mutation spliced in; a clear error when `original` is not where it says."""
    data = source.encode("utf-8")
    lines = data.splitlines(keepends=True)
    if m.line > len(lines):
        raise MutationError(f"mutation {m.id}: {m.path} has {len(lines)} lines, not {m.line}")
    start = sum(len(x) for x in lines[: m.line - 1]) + m.col
    want = m.original.encode("utf-8")
    if data[start : start + len(want)] != want:
        found = data[start : start + len(want)].decode("utf-8", "replace")
        raise MutationError(f"mutation {m.id} does not apply: expected {m.original!r} there, found {found!r}")
    return (data[:start] + m.replacement.encode("utf-8") + data[start + len(want) :]).decode("utf-8")


class _Sites:
    def __init__(self, path: str, source: str):
        self.path = path
        self.data = source.encode("utf-8")
        self.starts = [0]
        for line in self.data.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))
        self.out: list[Mutation] = []

    def offset(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def text(self, node: ast.AST) -> str:
        a = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        b = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return self.data[a:b].decode("utf-8")

    def add(self, kind: str, line: int, col: int, original: str, replacement: str) -> None:
        if original != replacement:
            self.out.append(
                Mutation(path=self.path, line=line, col=col, kind=kind, original=original, replacement=replacement)  # type: ignore[arg-type]
            )


def _skipped_nodes(tree: ast.AST) -> set[int]:
    """Nodes never mutated: annotations, docstrings and `if __name__ == "__main__"` blocks."""
    skip: set[int] = set()

    def cover(node: ast.AST | None) -> None:
        if node is not None:
            skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            cover(node.returns)
            for a in [*node.args.args, *node.args.kwonlyargs, *node.args.posonlyargs]:
                cover(a.annotation)
        elif isinstance(node, ast.AnnAssign):
            cover(node.annotation)
        elif isinstance(node, ast.Assert) or (isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)):
            cover(node)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                cover(body[0])
    return skip


def enumerate_mutations(path: str, source: str) -> list[Mutation]:
    """Every mutation of one file, in a fixed order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    sites = _Sites(path, source)
    skip = _skipped_nodes(tree)
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare):
            _comparison(sites, node)
        elif isinstance(node, ast.Constant):
            _constant(sites, node, parents.get(id(node)))
        elif isinstance(node, ast.If):
            _branch(sites, node)
        elif isinstance(node, ast.Call):
            _swap(sites, node)
    return sorted(sites.out, key=lambda m: (m.line, m.col, m.kind, m.replacement))


def _comparison(sites: _Sites, node: ast.Compare) -> None:
    if len(node.ops) != 1 or node.left.end_lineno != node.comparators[0].lineno:
        return
    left, right = node.left, node.comparators[0]
    line, col = left.end_lineno, left.end_col_offset
    a = sites.offset(line, col)  # type: ignore[arg-type]
    b = sites.offset(right.lineno, right.col_offset)
    between = sites.data[a:b].decode("utf-8")
    pattern, new = _FLIP[type(node.ops[0])]
    found = re.search(rf"(?<![\w=!<>]){pattern}(?![\w=])", between)
    if found is None:
        return
    sites.add("flip_comparison", line, col, between, between[: found.start()] + new + between[found.end() :])  # type: ignore[arg-type]


def _constant(sites: _Sites, node: ast.Constant, parent: ast.AST | None) -> None:
    value = node.value
    if node.lineno != node.end_lineno:
        return
    text = sites.text(node)
    if isinstance(value, bool):
        sites.add("wrong_constant", node.lineno, node.col_offset, text, str(not value))
        return
    if not isinstance(value, int) or not text.isdigit() or value > 1000:
        return
    arithmetic = isinstance(parent, (ast.BinOp, ast.Compare, ast.Subscript, ast.Slice)) or (
        isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "range"
    )
    if arithmetic:
        sites.add("off_by_one", node.lineno, node.col_offset, text, str(value + 1))
        if value > 0:
            sites.add("off_by_one", node.lineno, node.col_offset, text, str(value - 1))
    elif isinstance(parent, (ast.Assign, ast.Return, ast.AugAssign, ast.keyword)):
        sites.add("wrong_constant", node.lineno, node.col_offset, text, str(value + 1 if value != 1 else 0))


def _branch(sites: _Sites, node: ast.If) -> None:
    if node.orelse or len(node.body) > _MAX_BRANCH_STATEMENTS:
        return
    start = sites.offset(node.lineno, node.col_offset)
    line_start = sites.starts[node.lineno - 1]
    if sites.data[line_start:start].strip() or not sites.data[start:].startswith(b"if"):
        return  # an `elif`, or an `if` sharing its line with other code
    sites.add("removed_branch", node.lineno, node.col_offset, sites.text(node), "pass")


def _swap(sites: _Sites, node: ast.Call) -> None:
    args = node.args
    if len(args) < 2 or any(isinstance(a, ast.Starred) for a in args[:2]):
        return
    first, second = args[0], args[1]
    if first.lineno != second.end_lineno:
        return
    a, b = sites.text(first), sites.text(second)
    if a == b:
        return
    s = sites.offset(first.lineno, first.col_offset)
    mid = sites.data[
        sites.offset(first.end_lineno, first.end_col_offset) : sites.offset(second.lineno, second.col_offset)
    ]
    original = sites.data[s : sites.offset(second.end_lineno, second.end_col_offset)].decode("utf-8")
    sites.add("swapped_arguments", first.lineno, first.col_offset, original, b + mid.decode("utf-8") + a)
