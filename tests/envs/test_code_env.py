"""The `code` environment end to end on the real local sandbox: the bank's gold solutions verify to
1.0 and the wrong ones lower, tool outputs read well, bad answers are low rewards (never crashes),
rigged answers do not pass, and the HTTP routes work on a real loopback server."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from rollgate.core.errors import BadRequest
from rollgate.core.schemas import VerifyRequest
from rollgate.core.serving import serve_in_thread
from rollgate.core.session_store import MemorySessionStore
from rollgate.resources_servers.app import create_resources_app
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.envs.code import CodeEnv, example_tasks, extract_code
from rollgate.resources_servers.envs.code_harness import MARK
from rollgate.resources_servers.envs.code_tasks import TASKS
from tests.envs.gold import example_rows

LIMITS = {"timeout_s": 6.0, "cpu_s": 6}


@pytest.fixture
def rt() -> EnvRuntime:
    return EnvRuntime(CodeEnv(limits=LIMITS, per_test_timeout_s=1.0), MemorySessionStore())


def fenced(code: str) -> str:
    return f"My answer:\n```python\n{code}```\n"


async def verify_code(rt: EnvRuntime, row: dict, code_text: str):
    sid = (await rt.seed(row)).session_id
    return await rt.verify(sid, VerifyRequest(response=code_text))


async def test_every_bank_task_gold_scores_one_and_wrong_scores_less(rt):
    rows = example_tasks(len(TASKS), 0)
    assert {r["function_name"] for r in rows} == {t.function_name for t in TASKS}
    gate = asyncio.Semaphore(4)

    async def check(row):
        async with gate:
            gold = await verify_code(rt, row, fenced(row["gold_solution"]))
            wrong = await verify_code(rt, row, fenced(row["wrong_solution"]))
        return row["task_id"], gold, wrong

    for task_id, gold, wrong in await asyncio.gather(*(check(r) for r in rows)):
        assert gold.reward == 1.0, (task_id, gold)
        assert set(gold.reward_components) == {"basic", "edge"}
        assert 0.0 <= wrong.reward < 1.0, (task_id, wrong)
        # The group that the wrong solution fails scores below its gold share.
        assert any(wrong.reward_components[g] < gold.reward_components[g] for g in gold.reward_components)
        assert wrong.metrics["passed"] < wrong.metrics["total"]


def test_example_file_has_enough_tasks_and_hides_the_hidden_tests():
    rows = example_rows("code")
    assert len(rows) >= 20 and len({r["task_id"] for r in rows}) == len(rows)
    for row in rows:
        assert row["env"] == "code" and row["gold_solution"] and row["wrong_solution"]
        prompt = " ".join(m["content"] for m in row["responses_create_params"]["input"])
        assert row["function_name"] in prompt
        for tests in row["hidden_tests"].values():
            for call, _ in tests:
                assert f"{call} ==" not in prompt, (row["task_id"], call)
        assert "gold_solution" not in prompt and row["gold_solution"].strip() not in prompt


async def test_run_tests_reports_each_visible_example(rt):
    row = next(r for r in example_tasks(len(TASKS), 0) if r["function_name"] == "fizzbuzz")
    sid = (await rt.seed(row)).session_id
    out = await rt.call_tool(sid, "run_tests", {"code": row["gold_solution"]})
    assert not out.is_error and out.output.startswith("1/1 visible tests passed")
    assert "PASS fizzbuzz(3)" in out.output
    out = await rt.call_tool(sid, "run_tests", {"code": "def fizzbuzz(n):\n    print('debug')\n    return []\n"})
    assert out.output.startswith("0/1 visible tests passed")
    assert "FAIL fizzbuzz(3): expected ['1', '2', 'Fizz'], got []" in out.output and "debug" in out.output
    out = await rt.call_tool(sid, "run_tests", {"code": "def fizzbuzz(n) return 1"})
    assert out.is_error and "SyntaxError" in out.output
    out = await rt.call_tool(sid, "run_tests", {"code": "def other():\n    pass\n"})
    assert out.is_error and "fizzbuzz" in out.output


async def test_run_code_output_is_readable_and_bounded(rt):
    sid = (await rt.seed(example_tasks(1, 0)[0])).session_id
    program = "import sys\nprint(input()[::-1])\nprint('warn', file=sys.stderr)\nsys.exit(2)"
    out = await rt.call_tool(sid, "run_code", {"code": program, "stdin": "olleh\n"})
    assert not out.is_error
    assert out.output.startswith("exit code 2") and "--- stdout ---\nhello" in out.output
    assert "--- stderr ---\nwarn" in out.output
    out = await rt.call_tool(sid, "run_code", {"code": "while True: pass"})
    assert out.output.startswith("killed: wall-clock timeout")
    program = "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:9')"
    out = await rt.call_tool(sid, "run_code", {"code": program})
    assert "exit code 1" in out.output and "Error" in out.output
    for bad in ({"code": 5}, {}, {"code": "x", "shell": True}):
        out = await rt.call_tool(sid, "run_code", bad)
        assert out.is_error and "invalid arguments" in out.output


async def test_tool_budget_is_enforced():
    rt = EnvRuntime(CodeEnv(limits=LIMITS, max_tool_calls=1), MemorySessionStore())
    sid = (await rt.seed(example_tasks(1, 0)[0])).session_id
    assert not (await rt.call_tool(sid, "run_code", {"code": "print(1)"})).is_error
    out = await rt.call_tool(sid, "run_code", {"code": "print(1)"})
    assert out.is_error and "budget" in out.output


@pytest.mark.parametrize(
    "answer,needle",
    [
        ("I think the answer is to loop over the numbers.", "no ```python code block"),
        (fenced("def fizzbuzz(n:\n    return []\n"), "SyntaxError"),
        (fenced("raise RuntimeError('at import')\n"), "RuntimeError"),
        (fenced("fizzbuzz = 3\n"), "does not define a function"),
    ],
)
async def test_bad_final_answers_get_zero_reward_with_a_reason(rt, answer, needle):
    row = next(r for r in example_tasks(len(TASKS), 0) if r["function_name"] == "fizzbuzz")
    result = await verify_code(rt, row, answer)
    assert result.reward == 0.0 and sum(result.reward_components.values()) == 0.0
    assert needle in result.metrics["error"]


@pytest.mark.parametrize(
    "rigged",
    [
        # an object that claims to equal anything
        "class Any:\n    def __eq__(self, other):\n        return True\n\ndef fizzbuzz(n):\n    return Any()\n",
        # a list subclass with the same trick
        "class L(list):\n    def __eq__(self, other):\n        return True\n\ndef fizzbuzz(n):\n    return L()\n",
        # forged harness records printed straight to the output
        "import os, json\nfor i in range(20):\n"
        f"    os.write(1, ('\\n' + {MARK!r} + json.dumps({{'i': i, 'value': ['seq', []]}}) + '\\n').encode())\n"
        "def fizzbuzz(n):\n    return []\n",
    ],
)
async def test_rigged_answers_do_not_pass(rt, rigged):
    row = next(r for r in example_tasks(len(TASKS), 0) if r["function_name"] == "fizzbuzz")
    result = await verify_code(rt, row, fenced(rigged))
    assert result.reward <= 1 / 6, result  # only fizzbuzz(0) == [] is genuinely right for []


async def test_malformed_rows_are_rejected_naming_the_problem(rt):
    base = {"responses_create_params": {"input": "x"}, "env": "code"}
    cases = [
        ({}, "function_name"),
        ({"function_name": "f"}, "hidden_tests"),
        ({"function_name": "f x", "hidden_tests": {"a": [["f()", "1"]]}}, "identifier"),
        ({"function_name": "f", "hidden_tests": {"a": [["f(", "1"]]}}, "hidden_tests.a[0]"),
        ({"function_name": "f", "hidden_tests": {"a": [["f()", "os.system('x')"]]}}, "hidden_tests.a[0]"),
        ({"code_task": "nope"}, "task bank"),
    ]
    for extra, needle in cases:
        with pytest.raises(BadRequest) as err:
            await rt.seed({**base, **extra})
        assert needle in str(err.value), (extra, err.value)
    sid = (await rt.seed({**base, "code_task": "gcd"})).session_id  # a short row naming a bank task
    result = await rt.verify(sid, VerifyRequest(response=fenced(TASKS[6].gold)))
    assert TASKS[6].id == "gcd" and result.reward == 1.0


def test_the_last_python_block_is_the_answer():
    text = "try:\n```python\nx = 1\n```\nfinal:\n```py\ny = 2\n```\n```\nz = 3\n```"
    assert extract_code(text) == "z = 3\n"
    assert extract_code("```python\na = 1\n```") == "a = 1\n"
    assert extract_code("no code") is None


async def test_http_routes_serve_the_code_env_on_loopback():
    app = create_resources_app(EnvRuntime(CodeEnv(limits=LIMITS), MemorySessionStore()))
    row = next(r for r in example_tasks(len(TASKS), 0) if r["function_name"] == "gcd")
    with serve_in_thread(app) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as c:
            tools = {t["name"]: t for t in (await c.get("/tools")).json()}
            assert set(tools) == {"run_code", "run_tests"}
            assert tools["run_code"]["parameters"]["required"] == ["code"]
            sid = (await c.post("/sessions", json=row)).json()["session_id"]
            r = await c.post(f"/sessions/{sid}/tools/run_tests", json={"arguments": {"code": row["gold_solution"]}})
            assert r.status_code == 200 and r.json()["output"].startswith("1/1 visible tests passed")
            r = await c.post(f"/sessions/{sid}/verify", json={"response": fenced(row["wrong_solution"])})
            body = r.json()
            assert r.status_code == 200 and 0 < body["reward"] < 1
            assert set(body["reward_components"]) == {"basic", "edge"}
            r = await c.post("/sessions", json={**row, "hidden_tests": "all of them"})
            assert r.status_code == 400 and "hidden_tests" in r.json()["error"]["message"]
