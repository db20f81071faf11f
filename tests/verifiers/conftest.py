from __future__ import annotations

import pytest

from rollgate.verifiers.math_grader import MathGrader


@pytest.fixture(scope="module")
def grader():
    """One set of grading worker processes per test module (they take a few seconds to start)."""
    with MathGrader(workers=2, timeout_s=5.0) as g:
        yield g
