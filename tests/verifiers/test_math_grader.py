"""The math grader: math-verify for what mathexpr cannot read, and a time limit that counts only
the comparison, in worker processes (a real process pool, real sympy and math-verify)."""

from __future__ import annotations

import concurrent.futures
import os
import time

import pytest

from rollgate.core.errors import UpstreamError
from rollgate.verifiers.math_equiv import check_equivalence
from rollgate.verifiers.math_grader import GraderUnavailable, MathGrader


@pytest.mark.parametrize(
    "given, expected, equal",
    [
        ("\\{1,2,3\\}", "\\{3,2,1\\}", True),  # sets
        ("\\{1,2\\}", "\\{1,2,3\\}", False),
        ("(0,1]", "(0, 1]", True),  # intervals
        ("[0,1)", "(0,1]", False),
        ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", True),
        ("\\begin{pmatrix}1&2\\\\3&5\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", False),
        ("\\text{east}", "\\text{east}", True),
        ("\\text{west}", "\\text{east}", False),
        ("(1, 2)", "(1,2)", True),  # tuples
    ],
)
def test_structures_the_regex_path_cannot_read_go_to_math_verify(grader, given, expected, equal):
    eq = check_equivalence(given, expected, grader=grader)
    assert (eq.equal, eq.reason) == (equal, "math-verify")


def test_listing_candidates_does_not_match_by_one_of_them(grader):
    # math-verify's any-match extraction would accept a reply that lists many answers.
    assert not check_equivalence("\\{1\\}, \\{2\\}, \\{3\\}", "\\{3\\}", grader=grader).equal
    assert not check_equivalence("(0,1], (0,2], (0,3]", "(0,3]", grader=grader).equal


def test_the_time_limit_counts_the_comparison_not_the_wait():
    """Eight comparisons on one worker, each far under its limit but together far over it: all
    are graded (before, a caller-side timeout counted the queue, and the last ones scored 0)."""
    with MathGrader(workers=1, timeout_s=2.0) as grader:
        grader.compare("x+1", "1+x")  # start the worker
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda i: grader.compare(f"(x+{i})^2", f"x^2+{2 * i}x+{i * i}"), range(8)))
    assert [r.reason for r in results] == ["symbolic"] * 8 and all(r.equal for r in results)


def test_a_comparison_past_its_limit_is_not_equal_and_the_worker_goes_on():
    with MathGrader(workers=1, timeout_s=5.0) as grader:
        grader.compare("x+1", "1+x")  # start the worker: its imports are not part of any limit
        # Four sample points at 30 digits of HEAVY take far longer than a millisecond.
        eq = grader.compare(HEAVY, HEAVY + " + 0*x", timeout_s=0.001)
        assert (eq.equal, eq.reason) == (False, "timeout")
        assert grader.compare(HEAVY, HEAVY).equal  # the same worker grades the next one in time


HEAVY = "sqrt(exp(x)^3 + log(y + 9))^5 * (x + y)^7 / (x^2 + 3)"  # about 0.3 s of sympy work


def test_a_stuck_worker_is_an_infrastructure_error_never_a_grade(monkeypatch):
    """A worker that ignores its alarm (stuck in C code; here stopped with SIGSTOP) is given up
    after its limit plus a grace: the call fails as retryable infrastructure, not as a 0."""
    import signal

    from rollgate.verifiers import math_grader

    monkeypatch.setattr(math_grader, "HARD_GRACE_S", 0.5)
    with MathGrader(workers=1, timeout_s=0.5) as grader:
        grader.compare("x+1", "1+x")
        (worker,) = grader._executor()._processes.values()  # white-box: the pid to stop
        os.kill(worker.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(GraderUnavailable) as err:
            grader.compare("x+2", "2+x")
        assert time.monotonic() - started < 5
        assert isinstance(err.value, UpstreamError) and err.value.transient
        # the stuck worker was killed; a fresh pool grades (with room for a loaded machine's sympy)
        assert grader.compare("x+3", "3+x", timeout_s=10.0).equal


def test_an_idle_worker_that_died_is_replaced_before_the_next_comparison():
    with MathGrader(workers=1, timeout_s=5.0) as grader:
        grader.compare("x+1", "1+x")
        for proc in grader._executor()._processes.values():
            os.kill(proc.pid, 9)
        time.sleep(0.5)
        assert grader.compare("x+2", "2+x").equal
