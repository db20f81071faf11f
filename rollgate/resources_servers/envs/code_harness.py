"""Run a candidate function against test calls in a sandbox and judge the results on the host.

The harness runs inside the sandbox and only reports *values* (one marked JSON line per test
call, in a type-strict encoding); expected values never enter the sandbox and the comparison
happens here. Two processes: the runner loads the solution and evaluates the calls; the
supervisor, which never loads the solution, forwards the runner's values marked with a per-run
nonce that it reads only after forking the runner. So the program cannot pass a test by printing "passed" or
forged records, by exiting early (`sys.exit(0)`, `os._exit(0)`), by returning an object whose
`__eq__` always says yes, or by patching the harness: it has to return the right value.
"""

from __future__ import annotations

import ast
import inspect
import json
import math
import secrets
from dataclasses import dataclass
from typing import Any

MARK = "\x1erollgate-test:"  # + the run's nonce + "\x1e"
SOLUTION_FILE = "solution.py"


def encode_value(x: Any, _depth: int = 0) -> list:
    """A type-strict, JSON-safe encoding of a test result. Runs in the sandbox (its source is
    embedded in the harness) and on the host (for expected values). Subclasses of builtins are
    encoded as `other`, so a rigged subclass never equals an expected value."""
    if _depth > 50:
        return ["other", "too deep"]
    t = type(x)
    if x is None:
        return ["none"]
    if t is bool:
        return ["bool", x]
    if t is int:
        return ["int", x if -(2**53) < x < 2**53 else hex(x)]
    if t is float:
        return ["float", repr(x)]
    if t is str:
        return ["str", x]
    if t is list or t is tuple:
        return ["seq", [encode_value(v, _depth + 1) for v in x]]
    if t is dict:
        return [
            "dict",
            sorted(([encode_value(k, _depth + 1), encode_value(v, _depth + 1)] for k, v in x.items()), key=repr),
        ]
    if t is set or t is frozenset:
        return ["set", sorted((encode_value(v, _depth + 1) for v in x), key=repr)]
    return ["other", t.__name__]


def _number(enc: list) -> float | None:
    if enc[0] == "int":
        return float(int(enc[1], 16)) if isinstance(enc[1], str) else float(enc[1])
    if enc[0] == "float":
        return float(enc[1])
    return None


def same_value(got: Any, expected: Any) -> bool:
    """Compare two encodings: exact, except numbers (int == float when equal, floats to 1e-6)."""
    if not isinstance(got, list) or not got:
        return False
    if got[0] in ("int", "float") and expected[0] in ("int", "float"):
        a, b = _number(got), _number(expected)
        if got[0] == expected[0] == "int":
            return got[1] == expected[1]
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    if got[0] != expected[0] or len(got) != len(expected):
        return False
    if got[0] in ("seq", "set"):
        return len(got[1]) == len(expected[1]) and all(
            same_value(g, e) for g, e in zip(got[1], expected[1], strict=True)
        )
    if got[0] == "dict":
        return len(got[1]) == len(expected[1]) and all(
            same_value(gk, ek) and same_value(gv, ev) for (gk, gv), (ek, ev) in zip(got[1], expected[1], strict=True)
        )
    return got == expected


# The program the sandbox runs. It makes itself undumpable (so /proc/<pid>/mem and /proc/<pid>/fd
# stay closed to other processes of the uid), then forks the runner *before* it reads the run's
# nonce from stdin: the runner's memory never held the nonce. The runner closes stdin, points its
# stdout at stderr, loads the solution and writes each call's value to a pipe; the supervisor, which
# never loads the solution, forwards each value to stdout marked with the nonce. So every record the
# host accepts came through the supervisor, and the solution cannot write one.
_HARNESS = """from __future__ import annotations
import json, os, signal, sys
{encoder}
NAME = {name!r}
CALLS = json.loads({calls!r})
PER_TEST_S = {per_test_s!r}
try:
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
except Exception:
    pass


class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _runner(results):
    def emit(rec):
        results.write(json.dumps(rec) + "\\n")
        results.flush()

    signal.signal(signal.SIGALRM, _alarm)
    ns = {{"__name__": "solution"}}
    try:
        with open({solution!r}) as f:
            exec(compile(f.read(), {solution!r}, "exec"), ns)
        if not callable(ns.get(NAME)):
            raise NameError("the code does not define a function named " + NAME)
    except BaseException as e:
        emit({{"load_error": (type(e).__name__ + ": " + str(e))[:500]}})
        return
    for i, call in enumerate(CALLS):
        signal.setitimer(signal.ITIMER_REAL, PER_TEST_S)
        try:
            rec = {{"i": i, "value": encode_value(eval(call, ns))}}
        except _Timeout:
            rec = {{"i": i, "error": "timed out after %gs" % PER_TEST_S}}
        except BaseException as e:
            rec = {{"i": i, "error": (type(e).__name__ + ": " + str(e))[:300]}}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        emit(rec)


r, w = os.pipe()
sys.stdout.flush()
if os.fork() == 0:
    try:
        os.close(r)
        os.close(0)
        os.dup2(2, 1)  # the program's own prints go to stderr; the supervisor's stdout is not its
        sys.stdout = sys.stderr
        _runner(os.fdopen(w, "w"))
    finally:
        os._exit(0)
os.close(w)
mark = {mark!r} + sys.stdin.readline().strip() + "\\x1e"
sys.stdin.close()
out = sys.stdout.buffer


def _forward(rec):
    out.write(("\\n" + mark + json.dumps(rec) + "\\n").encode())
    out.flush()


_forward({{"start": True}})
seen = set()
with os.fdopen(r, "rb") as results:
    while len(seen) <= len(CALLS):
        line = results.readline(1 << 20)
        if not line:
            break
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        if "load_error" in rec and not seen:
            _forward({{"load_error": str(rec["load_error"])[:500]}})
            seen.add(-1)
        i = rec.get("i")
        if type(i) is int and 0 <= i < len(CALLS) and i not in seen:  # a test's first record counts
            seen.add(i)
            if isinstance(rec.get("value"), list):
                _forward({{"i": i, "value": rec["value"]}})
            else:
                _forward({{"i": i, "error": str(rec.get("error"))[:300]}})
os.wait()
"""


def harness_source(function_name: str, calls: list[str], per_test_s: float = 2.0) -> str:
    """The program a check runs (with `code=`, the nonce on stdin): the tests' calls, never their
    expected values, and no secret."""
    return _HARNESS.format(
        encoder=inspect.getsource(encode_value),
        name=function_name,
        calls=json.dumps(calls),
        per_test_s=per_test_s,
        mark=MARK,
        solution=SOLUTION_FILE,
    )


def new_nonce() -> str:
    return secrets.token_hex(16)


@dataclass
class TestOutcome:
    call: str
    expected: str
    passed: bool
    got: str  # a short description of what came back (value or error)


@dataclass
class HarnessReport:
    load_error: str | None
    outcomes: list[TestOutcome]
    started: bool = True  # False: the harness never ran (a sandbox failure, not the program's)

    @property
    def passed(self) -> int:
        return sum(o.passed for o in self.outcomes)


def _describe(enc: Any) -> str:
    try:
        return repr(_decode(enc))[:200]
    except Exception:
        return json.dumps(enc)[:200]


def _decode(enc: list) -> Any:
    kind = enc[0]
    if kind == "none":
        return None
    if kind in ("bool", "str"):
        return enc[1]
    if kind == "int":
        return int(enc[1], 16) if isinstance(enc[1], str) else enc[1]
    if kind == "float":
        return float(enc[1])
    if kind == "seq":
        return [_decode(v) for v in enc[1]]
    if kind == "dict":
        return {_decode(k) if k[0] != "seq" else tuple(_decode(k)): _decode(v) for k, v in enc[1]}
    if kind == "set":
        return {_decode(v) for v in enc[1]}
    return f"<{enc[1]} object>"


def judge(stdout: str, tests: list[tuple[str, str]], nonce: str) -> HarnessReport:
    """Read the supervisor's records from `stdout`: only lines marked with this run's `nonce`
    count (anything else is the program's); tests with no record (killed run) failed."""
    mark = MARK + nonce + "\x1e"
    records: dict[int, dict] = {}
    load_error = None
    started = False
    for line in stdout.split("\n"):  # not splitlines(): it splits at the \x1e of MARK
        if not line.startswith(mark):
            continue
        try:
            rec = json.loads(line[len(mark) :])
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        if rec.get("start") is True:
            started = True
        elif "load_error" in rec:
            load_error = str(rec["load_error"])
        elif isinstance(rec.get("i"), int):
            records.setdefault(rec["i"], rec)
    outcomes = []
    for i, (call, expected) in enumerate(tests):
        rec = records.get(i)
        want = encode_value(ast.literal_eval(expected))
        if rec is None:
            outcomes.append(TestOutcome(call, expected, False, "no result (the run was stopped)"))
        elif "error" in rec:
            outcomes.append(TestOutcome(call, expected, False, f"raised {rec['error']}"))
        else:
            ok = same_value(rec.get("value"), want)
            outcomes.append(TestOutcome(call, expected, ok, _describe(rec.get("value"))))
    return HarnessReport(load_error, outcomes, started)
