"""Wordle: feedback with duplicate letters, free invalid guesses, six-guess limit, shaped reward."""

from __future__ import annotations

import pytest

from rollgate.core.errors import BadRequest
from rollgate.core.schemas import VerifyRequest
from rollgate.resources_servers.envs.wordle import feedback
from tests.envs.gold import runtime

ROW = {"responses_create_params": {"input": "play"}, "env": "wordle", "secret": "apple"}
END = VerifyRequest(response="Answer: apple")


@pytest.mark.parametrize(
    "guess,secret,marks",
    [
        ("apple", "apple", "GGGGG"),
        ("speed", "abide", "..Y.Y"),  # two e's guessed, one in the secret: only one is marked
        ("eerie", "there", "Y.Y.G"),  # the green e uses up a copy before yellows are given
        ("allee", "apple", "GY..G"),
        ("llama", "hello", "YY..."),
        ("crane", "plumb", "....."),
    ],
)
def test_feedback_follows_the_duplicate_letter_rule(guess, secret, marks):
    assert feedback(guess, secret) == marks


async def test_solving_in_one_guess_earns_the_full_reward():
    rt = runtime("wordle")
    sid = (await rt.seed(ROW)).session_id
    out = await rt.call_tool(sid, "guess", {"word": "APPLE"})
    assert "GGGGG" in out.output and "solved in 1 guess" in out.output
    result = await rt.verify(sid, END)
    assert result.reward == 1.0 and result.reward_components == {"solved": 0.5, "efficiency": 0.5}


async def test_invalid_words_are_errors_that_cost_no_guess():
    rt = runtime("wordle")
    sid = (await rt.seed(ROW)).session_id
    for word, needle in [
        ("pear", "five-letter"),
        ("bananas", "five-letter"),
        ("ab1de", "five-letter"),
        ("zzzzz", "not in the word list"),
    ]:
        out = await rt.call_tool(sid, "guess", {"word": word})
        assert out.is_error and needle in out.output and "not counted" in out.output
    for args in ({"word": 12345}, {}, {"word": "x" * 100}):
        assert (await rt.call_tool(sid, "guess", args)).is_error
    assert (await rt.state(sid))["guesses"] == []
    out = await rt.call_tool(sid, "guess", {"word": "crane"})
    assert out.output.startswith("guess 1/6: CRANE -> ")


async def test_six_wrong_guesses_end_the_game_with_zero_reward():
    rt = runtime("wordle")
    sid = (await rt.seed(ROW)).session_id
    for i, w in enumerate(["crane", "pilot", "mouse", "juice", "vital", "brown"], 1):
        out = await rt.call_tool(sid, "guess", {"word": w})
        assert not out.is_error and f"guess {i}/6" in out.output
    assert "the word was APPLE" in out.output
    late = await rt.call_tool(sid, "guess", {"word": "apple"})
    assert late.is_error and "game is over" in late.output
    result = await rt.verify(sid, END)  # claiming the word in text earns nothing: the state decides
    assert result.reward == 0.0 and result.metrics == {"guesses": 6, "solved": False}


async def test_reward_shrinks_with_guesses_used():
    rt = runtime("wordle")
    rewards = []
    for n in range(1, 7):
        sid = (await rt.seed(ROW)).session_id
        for w in ["crane", "pilot", "mouse", "juice", "vital"][: n - 1]:
            await rt.call_tool(sid, "guess", {"word": w})
        await rt.call_tool(sid, "guess", {"word": "apple"})
        rewards.append((await rt.verify(sid, END)).reward)
    assert rewards == pytest.approx([1.0, 0.9, 0.8, 0.7, 0.6, 0.5])


@pytest.mark.parametrize("secret", ["zzzzz", "pear", 5])
async def test_a_secret_outside_the_word_list_is_a_bad_request(secret):
    with pytest.raises(BadRequest) as exc:
        await runtime("wordle").seed({**ROW, "secret": secret})
    assert "secret" in str(exc.value)
