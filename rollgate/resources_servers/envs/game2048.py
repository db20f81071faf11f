"""2048 on a 4x4 board: slide tiles, merge equal neighbours, reach the target tile.

Tools: `view_board()` and `move(direction)` with direction up/down/left/right. A move that moves
no tile, a move after the game is over (no legal move left) and a move beyond the row's
`max_moves` are error outputs; they change nothing.

Randomness lives in the session state: the new tile after move k is drawn from
`random.Random(f"{game_seed}:{k}")`, so every replica (and the example generator) plays the
same game from the same seed.

Reward (from the state): with M the highest tile and T the row's `target_tile`,
`progress` = 0.7 * min(1, log2(M / 4) / log2(T / 4)) and `reached` = 0.3 if M >= T else 0;
the reward is their sum (1.0 when the target is reached). Progress counts from 4, the largest
tile that spawns by itself: a game with no move, or no merge, earns 0 (`rollgate audit` found
that the first formula paid 0.10-0.20 for an episode with zero moves).
"""

from __future__ import annotations

import math
import random
from typing import Any, Literal

from pydantic import BaseModel, Field

from rollgate.core.schemas import TaskRow, VerifyRequest, VerifyResult
from rollgate.resources_servers.base import Environment, ToolError, tool
from rollgate.verifiers.compose import weighted_sum

SIZE = 4
Direction = Literal["up", "down", "left", "right"]
DIRECTIONS: tuple[Direction, ...] = ("up", "down", "left", "right")
WEIGHTS = {"progress": 0.7, "reached": 0.3}
SPAWN_MAX = 4  # the largest tile a move spawns

INSTRUCTIONS = (
    "You are playing 2048 on a 4x4 board. Use `move` with direction up, down, left or right: all tiles "
    "slide that way and two equal tiles that collide merge into their sum. After every move a new tile "
    "(2 or 4) appears. Use `view_board` to see the board. A move that changes nothing is rejected. "
    "Your goal is to create a tile of value {target} within {max_moves} moves; the reward grows with the "
    "highest tile you reach. When you reach the target or cannot move any more, reply `Answer: done`."
)

Board = list[list[int]]


def slide_row_left(row: list[int]) -> tuple[list[int], int]:
    """Slide and merge one row to the left; returns the new row and the points scored."""
    tiles = [v for v in row if v]
    out: list[int] = []
    points = 0
    i = 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(tiles[i] * 2)
            points += tiles[i] * 2
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return out + [0] * (len(row) - len(out)), points


def apply_move(board: Board, direction: Direction) -> tuple[Board, int]:
    """The board after sliding (no new tile), and the points scored."""

    # Rotate so every direction becomes "left", slide, rotate back.
    def rows_for(b: Board) -> Board:
        if direction == "left":
            return [r[:] for r in b]
        if direction == "right":
            return [r[::-1] for r in b]
        cols = [list(c) for c in zip(*b, strict=True)]
        return cols if direction == "up" else [c[::-1] for c in cols]

    def back(rows: Board) -> Board:
        if direction == "left":
            return rows
        if direction == "right":
            return [r[::-1] for r in rows]
        cols = rows if direction == "up" else [c[::-1] for c in rows]
        return [list(r) for r in zip(*cols, strict=True)]

    moved, total = [], 0
    for r in rows_for(board):
        new, pts = slide_row_left(r)
        moved.append(new)
        total += pts
    return back(moved), total


def legal_moves(board: Board) -> list[Direction]:
    return [d for d in DIRECTIONS if apply_move(board, d)[0] != board]


def spawn(board: Board, rng: random.Random) -> None:
    empty = [(r, c) for r in range(SIZE) for c in range(SIZE) if board[r][c] == 0]
    if empty:
        r, c = rng.choice(empty)
        board[r][c] = 4 if rng.random() < 0.1 else 2


def render(board: Board) -> str:
    return "\n".join(" ".join(f"{v or '.':>4}" for v in row) for row in board)


class Game2048State(BaseModel):
    board: Board
    game_seed: int
    target_tile: int = 64
    max_moves: int = 300
    moves: int = 0
    score: int = 0
    history: list[str] = Field(default_factory=list)

    @property
    def max_tile(self) -> int:
        return max(max(r) for r in self.board)


def _tile_rng(state: Game2048State) -> random.Random:
    # A string seed is hashed with SHA-512 by `random`: identical in every process and version.
    return random.Random(f"{state.game_seed}:{state.moves}")


class Game2048Env(Environment):
    name = "game2048"
    description = "2048: slide and merge tiles to reach a target tile."
    State = Game2048State
    reverify = "replay"

    def seed(self, task: TaskRow, rng: random.Random) -> tuple[Game2048State, str]:
        fields = task.env_fields
        target = int(fields.get("target_tile", 64))
        max_moves = int(fields.get("max_moves", 300))
        if target < 8 or target > 2048 or target & (target - 1):
            raise ValueError(f"target_tile must be a power of two from 8 to 2048, got {target}")
        if not 1 <= max_moves <= 10_000:
            raise ValueError(f"max_moves must be between 1 and 10000, got {max_moves}")
        state = Game2048State(
            board=[[0] * SIZE for _ in range(SIZE)],
            game_seed=rng.getrandbits(32),
            target_tile=target,
            max_moves=max_moves,
        )
        start = random.Random(f"{state.game_seed}:start")
        spawn(state.board, start)
        spawn(state.board, start)
        return state, f"Reach the {target} tile.\n{render(state.board)}"

    @tool
    def view_board(self, state: Game2048State) -> str:
        """Show the board, the score and the number of moves made."""
        return (
            f"{render(state.board)}\nscore: {state.score}  max tile: {state.max_tile}  "
            f"moves: {state.moves}/{state.max_moves}  target: {state.target_tile}"
        )

    @tool
    def move(self, state: Game2048State, direction: Direction) -> str:
        """Slide every tile up, down, left or right; equal tiles that collide merge."""
        if state.moves >= state.max_moves:
            raise ToolError(f"the move budget ({state.max_moves}) is used up; the game is over")
        if not legal_moves(state.board):
            raise ToolError("game over: no move changes the board")
        board, points = apply_move(state.board, direction)
        if board == state.board:
            raise ToolError(f"moving {direction} changes nothing; legal moves: {', '.join(legal_moves(state.board))}")
        state.moves += 1
        spawn(board, _tile_rng(state))
        state.board = board
        state.score += points
        state.history.append(direction)
        note = "  target reached!" if state.max_tile >= state.target_tile else ""
        if not legal_moves(state.board):
            note += "  game over: no legal moves left"
        return f"{render(state.board)}\nscore: {state.score}  max tile: {state.max_tile}{note}"

    def verify(self, state: Game2048State, request: VerifyRequest) -> VerifyResult:
        free = math.log2(SPAWN_MAX)  # tiles up to 4 appear without any move
        progress = min(1.0, max(0.0, math.log2(state.max_tile) - free) / (math.log2(state.target_tile) - free))
        reached = 1.0 if state.max_tile >= state.target_tile else 0.0
        return weighted_sum(
            {"progress": progress, "reached": reached},
            WEIGHTS,
            metrics={"max_tile": state.max_tile, "score": state.score, "moves": state.moves},
        )


# --- example data -------------------------------------------------------------------------------


def _greedy_move(board: Board) -> Direction | None:
    """One-ply greedy play (most empty cells, then points, then a fixed corner preference)."""
    best, best_key = None, None
    for rank, d in enumerate(("down", "left", "right", "up")):
        new, pts = apply_move(board, d)
        if new == board:
            continue
        empty = sum(v == 0 for r in new for v in r)
        key = (empty + (2 if d in ("down", "left") else 0), pts, -rank)
        if best_key is None or key > best_key:
            best, best_key = d, key
    return best


def play_gold(env: Game2048Env, state: Game2048State) -> list[str]:
    """Greedy moves from `state` until the target is reached (or no move/budget is left)."""
    moves: list[str] = []
    while state.max_tile < state.target_tile and state.moves < state.max_moves:
        d = _greedy_move(state.board)
        if d is None:
            break
        env.move(state, d)
        moves.append(d)
    return moves


def example_tasks(n: int, seed: int) -> list[dict[str, Any]]:
    """`n` 2048 rows (targets 32..128), deterministic for `seed`; `gold` holds a winning move list."""
    rng = random.Random(f"game2048:{seed}")
    env = Game2048Env()
    rows: list[dict[str, Any]] = []
    while len(rows) < n:
        target = (32, 64, 64, 128)[len(rows) % 4]
        max_moves = {32: 100, 64: 200, 128: 400}[target]
        row_seed = rng.getrandbits(31)
        task = TaskRow(responses_create_params={"input": []}, target_tile=target, max_moves=max_moves, seed=row_seed)
        state, _ = env.seed(task, random.Random(row_seed))
        gold = play_gold(env, state)
        if state.max_tile < target:
            continue  # greedy play lost this seed; keep only rows with a winning gold path
        i = len(rows)
        rows.append(
            {
                "responses_create_params": {
                    "input": [
                        {"role": "system", "content": INSTRUCTIONS.format(target=target, max_moves=max_moves)},
                        {"role": "user", "content": "The game has started. Look at the board and play."},
                    ]
                },
                "env": "game2048",
                "task_id": f"game2048-{seed}-{i:03d}",
                "seed": row_seed,
                "target_tile": target,
                "max_moves": max_moves,
                "gold": {
                    "calls": [{"name": "move", "arguments": {"direction": d}} for d in gold],
                    "response": "Answer: done",
                },
            }
        )
    return rows
