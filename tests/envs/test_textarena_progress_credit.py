"""textarena's invalid-move ending, closed (issue 32): a single-player game ends on a second
invalid move in a row and pays the progress of the position reached, which for RushHour,
Slitherlink, PegJump and Countdown is above 0 before any move. Rollgate measures what the start
pays and credits only the progress made from it (families/textarena.progress_credit).

Real parts: the textarena games themselves, the environment runtime, and `rollgate audit`'s own
probes (tool_spam, stall, tool_boundary_args) on the embedded stack with the scripted backend."""

from __future__ import annotations

import asyncio

import pytest

from rollgate.core.session_store import MemorySessionStore
from rollgate.evaluation.audit.run import AuditOptions, run_audit, stack_settings
from rollgate.evaluation.sources import StackSource
from rollgate.resources_servers.base import EnvRuntime
from rollgate.resources_servers.families import textarena as ta
from rollgate.resources_servers.registry import load_env

# (game, a seed whose starting position the game pays for, what it pays): measured on textarena 0.7.4
PAYING_STARTS = [("RushHour", 2, 0.25), ("Slitherlink", 2, 0.5), ("PegJump", 1, 1 / 14), ("Countdown", 1, 0.568)]
INVALID_ENDINGS = ["tool_spam", "stall", "tool_boundary_args"]


def play(env: str, seed: int, actions: list[str]):
    rt = EnvRuntime(load_env(env), MemorySessionStore())
    sid = asyncio.run(rt.seed({"responses_create_params": {"input": []}, "seed": seed})).session_id
    outputs = [asyncio.run(rt.call_tool(sid, "act", {"action": a})).output for a in actions]
    return outputs, asyncio.run(rt.verify(sid, {"response": "done"}))


@pytest.mark.parametrize(("game", "seed", "pays"), PAYING_STARTS)
def test_two_invalid_moves_earn_nothing_where_the_game_pays_its_start(game, seed, pays):
    outputs, result = play(f"textarena/{game}", seed, ["not a move", "still not a move"])
    assert "Game over (Invalid Move" in outputs[-1] and "reward 0.0" in outputs[-1]
    assert result.metrics["finished"] is True
    assert result.metrics["game_reward"] == pytest.approx(pays, abs=1e-3)  # what textarena pays
    assert result.metrics["start_reward"] == pytest.approx(pays, abs=1e-3)
    assert result.reward == 0.0


def test_progress_made_before_an_invalid_ending_is_still_paid():
    # PegJump-v0 starts with hole 5 empty: peg 12 jumps over 8 into it, one of the 13 pegs to remove
    outputs, result = play("textarena/PegJump", 1, ["[12 5]", "x", "x"])
    assert "invalid" not in outputs[0]
    assert "Game over (Invalid Move" in outputs[-1]
    assert result.metrics["game_reward"] == pytest.approx(2 / 14)
    assert result.reward == pytest.approx(1 / 13)


def test_a_game_whose_start_pays_nothing_keeps_its_own_reward():
    outputs, result = play("textarena/GuessTheNumber", 1, ["x", "x"])
    assert result.metrics["start_reward"] == 0.0 and result.reward == result.metrics["game_reward"] == 0.0


@pytest.mark.parametrize(
    ("reward", "start", "credit"),
    [
        (0.25, 0.25, 0.0),  # ended where it started
        (0.1, 0.25, 0.0),  # went backwards: nothing, not a penalty
        (0.625, 0.25, 0.5),  # half of what was left to gain
        (1.0, 0.5, 1.0),  # solved
        (3.0, 0.0, 3.0),  # a count (Set's sets) from a start that pays nothing
        (-1.0, 0.0, -1.0),  # a game's own penalty (Bandit) stays
        (0.4, 0.0, 0.4),
        (0.9, 1.0, 0.0),  # a start already paid in full leaves nothing to earn
    ],
)
def test_progress_credit(reward, start, credit):
    assert ta.progress_credit(reward, start) == pytest.approx(credit)


def test_the_audit_no_longer_finds_the_invalid_move_ending(tmp_path):
    envs = [f"textarena/{game}" for game, _, _ in PAYING_STARTS]
    # no allowlist: the textarena entries for these probes are gone from the shipped one
    opts = AuditOptions(envs=envs, n=8, seed=0, probes=["floor", *INVALID_ENDINGS], max_turns=8, resamples=500)

    def make_source(env: str) -> StackSource:
        return StackSource(stack_settings(opts, env), [env], concurrency=8)

    report = run_audit(opts, make_source)
    for env in envs:
        probes = report["envs"][env]["probes"]
        for name in INVALID_ENDINGS:
            assert probes[name]["verdict"] == "clean", (env, name, probes[name])
            assert probes[name]["mean"] == 0.0, (env, name)
