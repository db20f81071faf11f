"""Checks on what the model hands the sandbox: relative paths inside the repository, test
selectors that are not options, unified diffs whose files stay inside the repository."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from rollgate.resources_servers.base import ToolError

_HEADER = re.compile(r"^(?:\+\+\+|---) (\S+)", re.MULTILINE)


def repo_path(path: str, *, allow_root: bool = False) -> str:
    """A path relative to the repository root, or a ToolError the model can read."""
    p = PurePosixPath(path.strip() or ".")
    if "\0" in path or p.is_absolute() or ".." in p.parts:
        raise ToolError(f"path {path!r} is outside the repository: give a path relative to its root, without '..'")
    clean = p.as_posix()
    if clean == "." and not allow_root:
        raise ToolError("give a file path, not the repository root")
    return clean


def selectors(text: str) -> list[str]:
    out = text.split()
    for s in out:
        if s.startswith("-"):
            raise ToolError(
                f"selector {s!r} looks like an option: give test paths or node ids (tests/test_x.py::test_y)"
            )
        repo_path(s.split("::", 1)[0], allow_root=True)
    return out


def patch_strip(diff: str) -> int:
    """The -p level of a unified diff (1 for git's a/ b/ prefixes, else 0), after checking that every
    file it names lies inside the repository."""
    names = [n for n in _HEADER.findall(diff) if n != "/dev/null"]
    if not names:
        raise ToolError("the patch has no ---/+++ file headers: give a unified diff (as `git diff` prints)")
    strip = 1 if all(n.startswith(("a/", "b/")) for n in names) else 0
    for name in names:
        repo_path(name.split("/", 1)[1] if strip else name)
    return strip
