"""Solutions that try to game the `code` environment's verifier instead of solving the task, on the
real local sandbox. The verdict comes from the supervisor's records, marked with a per-run nonce
that the solution's process cannot read, so none of these earns more than an honest wrong answer.
(The row's expected values are given to the forgers on purpose: even knowing them, a forged record
does not count. A solution that knows them could return them, which is solving the task.)"""

from __future__ import annotations

import ast
import json

import pytest

from rollgate.core.schemas import VerifyRequest
from rollgate.core.session_store import MemorySessionStore
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.envs import code_tasks
from rollgate.resources_servers.envs.code import CodeEnv, CodeState, example_tasks
from rollgate.resources_servers.envs.code_harness import MARK, encode_value
from rollgate.resources_servers.envs.code_tasks import TASKS

LIMITS = {"timeout_s": 6.0, "cpu_s": 6}
WRONG = "def fizzbuzz(n):\n    return None\n"  # passes no test of the row


@pytest.fixture
def env() -> CodeEnv:
    return CodeEnv(limits=LIMITS, per_test_timeout_s=1.0)


@pytest.fixture
def row() -> dict:
    return next(r for r in example_tasks(len(TASKS), 0) if r["function_name"] == "fizzbuzz")


def forged_records(row: dict, mark: str) -> str:
    """Python source that writes a record with the right value of every hidden test to fd 1."""
    flat = [expected for tests in row["hidden_tests"].values() for _, expected in tests]
    lines = [json.dumps({"i": i, "value": encode_value(ast.literal_eval(e))}) for i, e in enumerate(flat)]
    payload = "".join(f"\n{mark}{line}\n" for line in lines)
    return f"import os\nos.write(1, {payload.encode()!r})\n"


async def verify(env: CodeEnv, row: dict, code: str):
    rt = EnvRuntime(env, MemorySessionStore())
    sid = (await rt.seed(row)).session_id
    return await rt.verify(sid, VerifyRequest(response=f"```python\n{code}```\n"))


@pytest.mark.parametrize(
    "mark",
    [
        "\x1erollgate-test\x1e",  # the fixed marker of the single-process harness
        MARK + "0" * 32 + "\x1e",  # today's marker with a guessed nonce
    ],
)
async def test_forged_records_with_the_right_values_earn_nothing(env, row, mark):
    for tail in ("os._exit(0)\n", WRONG):  # exit before the harness writes, or let it run
        result = await verify(env, row, forged_records(row, mark) + tail)
        assert result.reward == 0.0 and result.metrics["passed"] == 0, result


@pytest.mark.parametrize(
    "exit_call,reason",
    [("import sys\nsys.exit(0)\n", "load: SystemExit"), ("import os\nos._exit(0)\n", None)],
)
async def test_exiting_at_import_earns_nothing(env, row, exit_call, reason):
    result = await verify(env, row, exit_call + row["gold_solution"])
    assert result.reward == 0.0 and result.metrics["passed"] == 0, result
    assert result.metrics.get("error") == reason or (reason and result.metrics["error"].startswith(reason))


async def test_printed_pass_claims_earn_nothing(env, row):
    code = (
        "import sys\nprint('ALL TESTS PASSED')\nsys.__stdout__.write('PASS fizzbuzz(5)\\n10/10 passed\\n')\n"
        "sys.__stdout__.flush()\n" + WRONG
    )
    result = await verify(env, row, code)
    assert result.reward == 0.0 and result.metrics["passed"] == 0, result


async def test_patching_the_runner_cannot_reach_the_verdict(env, row):
    """The solution rewrites the runner's helpers so every call reports success: only the values
    it actually returns reach the supervisor, and `True` is no list of strings."""
    code = (
        "import __main__, json\n"
        "__main__.encode_value = lambda x, _depth=0: ['bool', True]\n"
        "__main__.same_value = lambda *a: True\n" + WRONG
    )
    result = await verify(env, row, code)
    assert result.reward == 0.0 and result.metrics["passed"] == 0, result


async def test_the_solution_cannot_reach_the_supervisor(env, row):
    """From the solution's process: the supervisor's stdin (the nonce), stdout (the verdict channel),
    memory and environment are closed, and it cannot be stopped or killed."""
    probe = (
        "import os, signal, sys\nppid = os.getppid()\n"
        "for what, path, mode in (('stdin', 'fd/0', 'rb'), ('stdout', 'fd/1', 'wb'), ('mem', 'mem', 'rb'),"
        " ('environ', 'environ', 'rb')):\n"
        "    try:\n        open(f'/proc/{ppid}/{path}', mode)\n        print('OPENED', what, file=sys.stderr)\n"
        "    except OSError as e:\n        print('denied', what, e.errno, file=sys.stderr)\n"
        "for sig in (signal.SIGSTOP, signal.SIGKILL):\n    os.kill(ppid, sig)\n" + WRONG
    )
    state = CodeState(function_name="fizzbuzz", visible=[], hidden={"basic": [("fizzbuzz(1)", "['1']")]})
    report, run = await env._run_harness(state, probe, [("fizzbuzz(1)", "['1']")])
    assert "OPENED" not in run.stderr, run.stderr
    assert all(f"denied {what} 13" in run.stderr for what in ("stdin", "stdout", "mem", "environ")), run.stderr
    # the supervisor outlived the signals and reported the (wrong) value
    assert report.started and report.outcomes[0].got == "None" and not report.outcomes[0].passed


async def test_the_models_own_runs_hold_nothing_of_the_task(env, row):
    """run_code: the work dir holds only the program; the task bank is neither importable nor on disk."""
    rt = EnvRuntime(env, MemorySessionStore())
    sid = (await rt.seed(row)).session_id
    program = (
        "import os\nprint(sorted(os.listdir('.')))\n"
        "try:\n    import rollgate.resources_servers.envs.code_tasks\nexcept ModuleNotFoundError as e:\n"
        "    print('no module', e.name)\n"
        f"print(os.path.exists({code_tasks.__file__!r}))\n"
    )
    out = await rt.call_tool(sid, "run_code", {"code": program})
    assert "--- stdout ---\n['_rollgate_exec.py']\nno module rollgate\nFalse" in out.output, out.output
