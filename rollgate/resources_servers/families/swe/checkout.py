"""The file trees of one task: pristine (the sdist), buggy (one mutation applied) and visible (the
buggy tree with the target tests cut out of their files: what the model's sandbox holds)."""

from __future__ import annotations

import ast
import difflib
import functools
import os
from pathlib import Path

from rollgate.core.errors import BadRequest
from rollgate.resources_servers.families.swe.mutations import Mutation, MutationError, apply
from rollgate.resources_servers.families.swe.projects import Project

Files = dict[str, bytes]
_MAX_FILE_BYTES = 1 << 20
_SKIPPED_DIRS = ("__pycache__",)


@functools.lru_cache(maxsize=16)
def _read_tree(root: str) -> tuple[tuple[str, bytes], ...]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_DIRS)
        for name in sorted(filenames):
            full = Path(dirpath, name)
            if full.is_symlink() or full.stat().st_size > _MAX_FILE_BYTES:
                continue
            out.append((full.relative_to(root).as_posix(), full.read_bytes()))
    return tuple(out)


def pristine(root: Path) -> Files:
    """The unpacked sdist, as {relative path: bytes} (read once per process)."""
    return dict(_read_tree(str(root)))


def source_files(project: Project, files: Files) -> list[str]:
    return [p for p in files if project.is_source_path(p)]


def buggy(project: Project, files: Files, mutation: Mutation) -> Files:
    if not project.is_source_path(mutation.path):
        raise MutationError(f"mutation path {mutation.path!r} is not a source file of {project.name}")
    if mutation.path not in files:
        raise MutationError(f"mutation path {mutation.path!r} is not in {project.name} {project.version}")
    out = dict(files)
    out[mutation.path] = apply(files[mutation.path].decode("utf-8"), mutation).encode("utf-8")
    return out


def split_node_id(node_id: str) -> tuple[str, list[str]]:
    """`tests/test_x.py::TestA::test_b[1-2]` -> ("tests/test_x.py", ["TestA", "test_b"])."""
    path, _, rest = node_id.partition("::")
    names = [n.split("[", 1)[0] for n in rest.split("::")] if rest else []
    return path, names


def check_targets(project: Project, files: Files, targets: list[str]) -> None:
    for t in targets:
        path, names = split_node_id(t)
        if not names or path not in files or not project.is_test_path(path):
            raise BadRequest(
                f"target test {t!r} is not a test of {project.name} {project.version}",
                component="env:swe",
                field="target_tests",
            )


def hide_tests(source: str, names: list[list[str]]) -> str:
    """`source` without the test functions (or methods) named by `names` (their decorators too)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    cut: list[tuple[int, int, ast.AST]] = []
    for chain in names:
        body: list[ast.stmt] = tree.body
        parent: ast.AST = tree
        for i, name in enumerate(chain):
            node = next((n for n in body if getattr(n, "name", None) == name), None)
            if node is None:
                break
            if i == len(chain) - 1:
                first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
                cut.append((first, node.end_lineno or node.lineno, parent))
            else:
                parent, body = node, getattr(node, "body", [])
    emptied: set[int] = set()
    for start, end, parent in sorted(set(cut), key=lambda c: -c[0]):
        indent = lines[start - 1][: len(lines[start - 1]) - len(lines[start - 1].lstrip())]
        lines[start - 1 : end] = []
        if isinstance(parent, ast.ClassDef) and id(parent) not in emptied:
            remaining = [n for n in parent.body if not any(s <= n.lineno <= e for s, e, p in cut if p is parent)]
            if not remaining:
                emptied.add(id(parent))
                lines.insert(start - 1, f"{indent}pass\n")
    return "".join(lines)


def _class_method(tree: ast.Module, cls: str, method: str) -> tuple[bool, list[str]]:
    """(whether class `cls` of the module defines `method` itself, the names of its bases)."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            own = any(getattr(n, "name", None) == method for n in node.body)
            bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
            return own, bases
    return False, []


def _definition(project: Project, files: Files, path: str, names: list[str]) -> tuple[str, list[str]] | None:
    """Where a test's code is written: its own file and chain, or, for a method a test class
    inherits (a mixin, a base test class), the test file and class that define it."""
    tree = ast.parse(files[path].decode("utf-8"))
    if len(names) == 1:
        found = any(getattr(n, "name", None) == names[0] for n in tree.body)
        return (path, names) if found else None
    if len(names) != 2:
        return None
    cls, method = names
    own, bases = _class_method(tree, cls, method)
    if own:
        return path, names
    for base in bases:
        for other in [path, *sorted(p for p in files if p.endswith(".py") and project.is_test_path(p))]:
            try:
                other_tree = ast.parse(files[other].decode("utf-8"))
            except SyntaxError:
                continue
            if _class_method(other_tree, base, method)[0]:
                return other, [base, method]
    return None


def visible(project: Project, files: Files, targets: list[str]) -> Files:
    """The tree the model sees: the target tests' code is not in it (not even in the sandbox). An
    inherited test is cut from the class that defines it, so its siblings there go too (they are
    still run at verification, from the pristine files)."""
    by_file: dict[str, list[list[str]]] = {}
    for t in targets:
        path, names = split_node_id(t)
        where = _definition(project, files, path, names) if path in files else None
        if where is None:
            raise BadRequest(
                f"target test {t!r}: its definition cannot be found, so it cannot be hidden",
                component="env:swe",
                field="target_tests",
            )
        by_file.setdefault(where[0], []).append(where[1])
    out = dict(files)
    for path, names in by_file.items():
        out[path] = hide_tests(files[path].decode("utf-8"), names).encode("utf-8")
    return out


def unified_diff(before: Files, after: Files) -> str:
    """A `git diff`-style patch (a/ and b/ prefixes) from `before` to `after`."""
    chunks = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        a = old.decode("utf-8").splitlines(keepends=True) if old is not None else []
        b = new.decode("utf-8").splitlines(keepends=True) if new is not None else []
        src = f"a/{path}" if old is not None else "/dev/null"
        dst = f"b/{path}" if new is not None else "/dev/null"
        chunks.append("".join(difflib.unified_diff(a, b, src, dst)))
    return "".join(chunks)
