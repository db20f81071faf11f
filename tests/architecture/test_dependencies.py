"""The runtime imports only what pyproject.toml's `dependencies` install: the packages of the extras
(dev's openai, parquet's pyarrow) appear only where their extra is named, and lazily."""

from __future__ import annotations

import ast
from pathlib import Path

import rollgate

ROOT = Path(rollgate.__file__).parent


def top_level_imports() -> dict[str, set[str]]:
    """module file -> top-level packages it imports (anywhere in the file)."""
    out: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        out[str(path.relative_to(ROOT))] = names
    return out


def test_the_runtime_never_imports_the_openai_sdk():
    assert [f for f, names in top_level_imports().items() if "openai" in names] == []


def test_pyarrow_is_imported_only_by_the_parquet_exporter():
    users = sorted(f for f, names in top_level_imports().items() if "pyarrow" in names)
    assert users == ["trainer_adapters/parquet.py"]
    exports = (ROOT / "trainer_adapters" / "exports.py").read_text()
    assert "\nfrom rollgate.trainer_adapters.parquet import" not in exports  # imported in export(), lazily
