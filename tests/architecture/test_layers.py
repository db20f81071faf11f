"""The package layers of docs/architecture.md, enforced: each layer imports only the layers
below it (import-linter contracts in pyproject.toml), and modules stay small."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400
# Data, not logic: tables of tasks whose length is their content.
DATA_TABLES = {"rollgate/resources_servers/envs/code_tasks.py"}


def test_import_contracts_hold():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports is missing: install the dev extra (import-linter)")
    done = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_no_module_holds_two_ideas():
    long = {}
    for path in (ROOT / "rollgate").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        n = sum(1 for _ in path.open(encoding="utf-8"))
        if n > MAX_LINES and rel not in DATA_TABLES:
            long[rel] = n
    assert not long, f"modules over {MAX_LINES} lines (split them by idea): {long}"
