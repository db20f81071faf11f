"""Every shipped example row is solvable: replaying its gold tool calls and final answer through
EnvRuntime verifies to the top reward, and doing the wrong thing verifies low. This doubles as a
validation of the example data."""

from __future__ import annotations

import pytest

from rollgate.core.schemas import VerifyRequest
from rollgate.verifiers.mathexpr import evaluate, format_number
from tests.envs.gold import example_rows, replay, runtime

ENVS = ["math", "workplace", "game2048", "wordle"]


def _top_reward(env: str, row: dict) -> float:
    if env == "wordle":  # shaped by the number of guesses: 1.0 for one down to 0.5 for six
        return 0.5 + 0.5 * (6 - len(row["gold"]["calls"])) / 5
    return 1.0


@pytest.mark.parametrize("env", ENVS)
def test_examples_have_enough_distinct_tasks(env):
    rows = example_rows(env)
    assert len(rows) >= 20
    assert len({r["task_id"] for r in rows}) == len(rows)
    assert all(r["env"] == env and r["responses_create_params"]["input"] for r in rows)


@pytest.mark.parametrize("env", ENVS)
async def test_gold_path_verifies_to_the_top_reward(env):
    rt = runtime(env)
    for row in example_rows(env):
        sid = (await rt.seed(row)).session_id
        outputs = await replay(rt, sid, row["gold"]["calls"])
        assert not any(o.is_error for o in outputs), (row["task_id"], [o.output for o in outputs])
        result = await rt.verify(sid, VerifyRequest(response=row["gold"]["response"]))
        assert result.reward == pytest.approx(_top_reward(env, row)), (row["task_id"], result)


async def test_math_wrong_answer_gets_zero():
    rt = runtime("math")
    for row in example_rows("math"):
        sid = (await rt.seed(row)).session_id
        await replay(rt, sid, row["gold"]["calls"])
        expected = row["expected_answer"]  # a wrong value written in the right form
        wrong = expected.replace("x^2", "2x^2") if "x" in expected else format_number(evaluate(expected) + 1)
        result = await rt.verify(sid, VerifyRequest(response=f"Answer: {wrong}"))
        assert result.reward == 0.0, (row["task_id"], result)


async def test_workplace_doing_nothing_gets_zero():
    rt = runtime("workplace")
    for row in example_rows("workplace"):
        sid = (await rt.seed(row)).session_id
        result = await rt.verify(sid, VerifyRequest(response="Answer: done"))
        assert result.reward == 0.0 and result.metrics["problems"], row["task_id"]


async def test_game2048_without_moves_stays_low():
    rt = runtime("game2048")
    for row in example_rows("game2048")[:8]:
        sid = (await rt.seed(row)).session_id
        result = await rt.verify(sid, VerifyRequest(response="Answer: done"))
        assert result.reward < 0.3 and result.reward_components["reached"] == 0.0


async def test_wordle_wrong_guesses_get_zero():
    rt = runtime("wordle")
    for row in example_rows("wordle")[:8]:
        sid = (await rt.seed(row)).session_id
        wrong = [w for w in ("crane", "pilot", "mouse", "juice", "vital", "brown", "world") if w != row["secret"]][:6]
        outputs = await replay(rt, sid, [{"name": "guess", "arguments": {"word": w}} for w in wrong])
        assert "out of guesses" in outputs[-1].output
        result = await rt.verify(sid, VerifyRequest(response=f"Answer: {wrong[-1]}"))
        assert result.reward == 0.0 and result.metrics == {"guesses": 6, "solved": False}
