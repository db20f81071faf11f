"""2048: the sliding rules, seeded determinism (the RNG lives in the state), illegal moves."""

from __future__ import annotations

import pytest

from rollgate.core.errors import BadRequest
from rollgate.core.schemas import VerifyRequest
from rollgate.resources_servers.envs.game2048 import apply_move, slide_row_left
from tests.envs.gold import example_rows, replay, runtime

ROW = {"responses_create_params": {"input": "play"}, "env": "game2048", "seed": 7, "target_tile": 16}


@pytest.mark.parametrize(
    "row,after,points",
    [
        ([2, 2, 2, 2], [4, 4, 0, 0], 8),
        ([2, 2, 4, 0], [4, 4, 0, 0], 4),
        ([4, 0, 4, 4], [8, 4, 0, 0], 8),
        ([0, 0, 0, 2], [2, 0, 0, 0], 0),
        ([2, 4, 8, 16], [2, 4, 8, 16], 0),
    ],
)
def test_a_row_slides_and_merges_each_tile_once(row, after, points):
    assert slide_row_left(row) == (after, points)


def test_every_direction_slides_the_right_way():
    board = [[2, 0, 0, 2], [0, 0, 0, 0], [0, 0, 0, 0], [2, 0, 0, 0]]
    assert apply_move(board, "left")[0][0] == [4, 0, 0, 0]
    assert apply_move(board, "right")[0][0] == [0, 0, 0, 4]
    assert [r[0] for r in apply_move(board, "up")[0]] == [4, 0, 0, 0]
    assert [r[0] for r in apply_move(board, "down")[0]] == [0, 0, 0, 4]


async def test_same_seed_same_game_in_separate_sessions():
    rt = runtime("game2048")
    row = example_rows("game2048")[0]
    a, b = (await rt.seed(row)).session_id, (await rt.seed(row)).session_id
    moves = [c for c in row["gold"]["calls"][:15]]
    assert [o.output for o in await replay(rt, a, moves)] == [o.output for o in await replay(rt, b, moves)]
    assert await rt.state(a) == await rt.state(b)


async def test_illegal_moves_are_error_outputs_and_change_nothing():
    rt = runtime("game2048")
    seeded = await rt.seed(ROW)
    sid = seeded.session_id
    assert "Reach the 16 tile" in seeded.observation
    state = await rt.state(sid)
    # Seed 7 starts with both tiles on the top row, so "up" moves nothing.
    assert state["board"][0] == [2, 0, 0, 2]
    out = await rt.call_tool(sid, "move", {"direction": "up"})
    assert out.is_error and "changes nothing" in out.output and "legal moves: down, left, right" in out.output
    for args in ({"direction": "diagonal"}, {"direction": 1}, {}, {"direction": "up", "speed": 2}):
        out = await rt.call_tool(sid, "move", args)
        assert out.is_error and "invalid arguments for move" in out.output, args
    assert await rt.state(sid) == state


async def test_game_over_and_move_budget_are_reported():
    rt = runtime("game2048")
    sid = (await rt.seed({**ROW, "max_moves": 2})).session_id
    state = await rt.state(sid)
    legal = [d for d in ("up", "down", "left", "right") if apply_move(state["board"], d)[0] != state["board"]]
    out1 = await rt.call_tool(sid, "move", {"direction": legal[0]})
    assert not out1.is_error
    board = (await rt.state(sid))["board"]
    legal = [d for d in ("up", "down", "left", "right") if apply_move(board, d)[0] != board]
    assert not (await rt.call_tool(sid, "move", {"direction": legal[0]})).is_error
    out = await rt.call_tool(sid, "move", {"direction": legal[0]})
    assert out.is_error and "budget" in out.output
    view = await rt.call_tool(sid, "view_board", {})
    assert "moves: 2/2" in view.output


async def test_reward_grows_with_the_highest_tile():
    rt = runtime("game2048")
    row = next(r for r in example_rows("game2048") if r["target_tile"] == 64)
    sid = (await rt.seed(row)).session_id
    rewards = []
    calls = row["gold"]["calls"]
    for chunk in (calls[: len(calls) // 3], calls[len(calls) // 3 : -1], calls[-1:]):
        await replay(rt, sid, chunk)
        rewards.append((await rt.verify(sid, VerifyRequest(response="done"))).reward)
    assert rewards[0] < rewards[1] < rewards[2] == 1.0


@pytest.mark.parametrize(
    "extra,needle",
    [
        ({"target_tile": 100}, "power of two"),
        ({"target_tile": 4}, "power of two"),
        ({"target_tile": "big"}, "invalid literal"),
        ({"max_moves": 0}, "max_moves"),
    ],
)
async def test_malformed_rows_are_bad_requests(extra, needle):
    with pytest.raises(BadRequest) as exc:
        await runtime("game2048").seed({**ROW, **extra})
    assert needle in str(exc.value)


async def test_a_full_board_without_merges_is_game_over():
    rt = runtime("game2048")
    sid = (await rt.seed(ROW)).session_id
    full = [[2, 4, 2, 4], [4, 2, 4, 2], [2, 4, 2, 4], [4, 2, 4, 2]]

    def fill(record):
        record["state"]["board"] = full

    await rt.store.update(sid, fill)
    out = await rt.call_tool(sid, "move", {"direction": "left"})
    assert out.is_error and "game over" in out.output
    assert (await rt.state(sid))["board"] == full


async def test_a_game_with_no_move_earns_nothing():
    # `rollgate audit` found the old formula paid 0.10-0.20 here: the spawned 2 or 4 counted as progress
    rt = runtime("game2048")
    for row in example_rows("game2048")[:6]:
        sid = (await rt.seed(row)).session_id
        result = await rt.verify(sid, VerifyRequest(response="Answer: done"))
        assert result.reward == 0.0 and result.metrics["moves"] == 0
