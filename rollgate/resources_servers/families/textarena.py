"""textarena's single-player games as an environment family: `textarena/<game>`, one tool `act`.

A textarena game is a live Python object, and a session must live in a JSON session store (Redis
in the distributed shape, where the next call may reach another replica). So the state is the
game's seed and the list of actions taken; each call rebuilds the game by resetting it with the
seed and replaying the actions. That is deterministic because the game's randomness is confined to
a generator of its own (see `_isolated`), cheap because the games are small and an in-process
cache of recent positions skips most replays, and safe because nothing executable (no pickle) is
ever read back from the store. The reward is the game's own, from `env.close()` at the end, with
one correction (`progress_credit`): the credit a game pays for its starting position is taken off.

textarena's single-player games end on a second invalid move in a row and pay the progress of the
position reached (and some pay it when the move limit runs out). For RushHour, Slitherlink, PegJump
and Countdown that progress is above 0 before any move (up to 0.57), so a policy earns it by
writing two invalid moves, or by stalling; `rollgate audit`'s tool_spam, stall and
tool_boundary_args probes found it. Rollgate measures what the game pays at the start (the same two
invalid moves on a fresh copy, at seeding) and credits only the progress made from there.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import io
import logging
import random
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from rollgate.core.errors import BadRequest
from rollgate.core.rows import derive_seed
from rollgate.core.schemas import TaskRow, VerifyRequest, VerifyResult
from rollgate.resources_servers.base import Environment, ToolError, tool
from rollgate.resources_servers.families.common import (
    Library,
    call_library,
    field_of,
    prompt_or_observation,
)
from rollgate.resources_servers.families.splits import check_n, check_split, take
from rollgate.resources_servers.registry import EnvSpec

log = logging.getLogger("rollgate.envs.textarena")

FAMILY = "textarena"
LIB = Library("textarena", "textarena")

# game -> its default textarena id. The single-player games that run offline (docs/environments.md
# lists the ones left out and why).
GAMES: dict[str, str] = {
    g: f"{g}-v0"
    for g in [
        "2048",
        "Bandit",
        "Blackjack",
        "Countdown",
        "Crosswords",
        "Cryptarithm",
        "FifteenPuzzle",
        "FrozenLake",
        "GuessTheNumber",
        "LightsOut",
        "LogicPuzzle",
        "Mastermind",
        "Minesweeper",
        "PegJump",
        "RushHour",
        "Secretary",
        "Set",
        "Slitherlink",
        "Sudoku",
        "ThreeCardMonte",
        "TowerOfHanoi",
    ]
}
# Games whose seed decides more than the first screen shows (a hidden code, mine field or target;
# cards or tiles drawn later): for them a task is its seed, for the others its starting position.
SEED_IS_TASK = frozenset(
    ["2048", "Bandit", "Blackjack", "GuessTheNumber", "Mastermind", "Minesweeper", "Secretary", "Set", "ThreeCardMonte"]
)
HOW_TO_PLAY = "Make each move with the `act` tool, e.g. act(action='[your move]'); one move per call."
# An action no game accepts, and how many in a row end a game at the latest (textarena's
# single-player games allow one invalid move, then end on the next).
INVALID_ACTION = ""
MOST_INVALID_MOVES = 3

# The games share module-level state (`random`, stdout) while they run: one game step at a time.
_GAME_LOCK = threading.Lock()


class _PrivateRandom(random.Random):
    """A game's own generator, standing in for the `random` module inside textarena's modules."""

    Random = random.Random  # a game that builds its own generator (`random.Random(seed)`) still can
    SystemRandom = random.SystemRandom


@contextlib.contextmanager
def _isolated(rng: random.Random) -> Iterator[None]:
    """textarena's games draw from the module-level `random`, and reset reseeds it. Point every loaded
    textarena module's `random` at this game's generator meanwhile: the game replays identically
    whatever else the process does with `random`, and the process's own `random` is left alone."""
    swapped = [
        m for n, m in list(sys.modules.items()) if n.startswith("textarena") and getattr(m, "random", None) is random
    ]
    for m in swapped:
        m.random = rng
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):  # some generators print their retries
            yield
    finally:
        for m in swapped:
            m.random = random
        if printed.getvalue():
            log.debug("textarena printed: %s", printed.getvalue().strip()[:500])


@dataclass
class Step:
    text: str
    done: bool
    reward: float | None = None
    reason: str | None = None


def _text(observation: list[Any] | None) -> str:
    # the player's own action echoed back is left out: the model knows what it sent
    return "\n".join(str(m[1]) for m in observation or [] if getattr(m[2], "name", "") != "PLAYER_ACTION").strip()


class Games:
    """Rebuilds games from (id, seed, actions), with a small cache of recent positions."""

    def __init__(self, max_cached: int = 256):
        self._cache: OrderedDict[tuple, tuple[Any, random.Random]] = OrderedDict()
        self._start_rewards: dict[tuple, float] = {}  # GRPO groups repeat a task: measured once
        self._max = max_cached

    def start(self, game_id: str, seed: int) -> str:
        with _GAME_LOCK:
            env, rng, observation = self._fresh(game_id, seed)
            self._remember((game_id, seed, ()), env, rng)
            return _text(observation)

    def play(self, game_id: str, seed: int, actions: list[str]) -> Step:
        """The result of the last of `actions`, after replaying the others."""
        *before, action = actions
        with _GAME_LOCK:
            found = self._recall((game_id, seed, tuple(before)))
            if found is None:
                env, rng, _ = self._fresh(game_id, seed)
                for i, earlier in enumerate(before):
                    with _isolated(rng):
                        done, _ = env.step(action=earlier)
                        env.get_observation()
                    if done:
                        raise RuntimeError(f"replay diverged: the game ended at action {i}")
            else:
                env, rng = found
            with _isolated(rng):
                done, _ = env.step(action=action)
                _, observation = env.get_observation()
                closed = env.close() if done else None
            if not done:
                self._remember((game_id, seed, tuple(actions)), env, rng)
                return Step(_text(observation), done=False)
            reward, reason = _reward(closed)
            return Step(_text(observation), done=True, reward=reward, reason=reason)

    def start_reward(self, game_id: str, seed: int) -> float:
        """What the game pays when it ends at its starting position: invalid moves on a fresh copy
        until it ends (two, for every game of GAMES). 0.0 for a game that invalid moves do not end."""
        key = ("start", game_id, seed)
        found = self._start_rewards.get(key)
        if found is not None:
            return found
        with _GAME_LOCK:
            # a copy of the position `start` just cached (a reset can take 0.5 s: RushHour)
            env, rng = self._recall((game_id, seed, ())) or self._fresh(game_id, seed)[:2]
            value = 0.0
            for _ in range(MOST_INVALID_MOVES):
                with _isolated(rng):
                    done, _ = env.step(action=INVALID_ACTION)
                    closed = env.close() if done else None
                if done:
                    value = _reward(closed)[0] or 0.0
                    break
        self._start_rewards[key] = value
        while len(self._start_rewards) > max(self._max, 1):
            self._start_rewards.pop(next(iter(self._start_rewards)))
        return value

    def _fresh(self, game_id: str, seed: int) -> tuple[Any, random.Random, list[Any]]:
        import textarena as ta
        from textarena.envs.registration import ENV_REGISTRY

        # import the game's module before swapping `random` in textarena's loaded modules
        importlib.import_module(str(ENV_REGISTRY[game_id].entry_point).split(":")[0])
        rng = _PrivateRandom(seed)
        with _isolated(rng):
            env = ta.make(f"{game_id}-raw")
            env.reset(num_players=1, seed=seed)
            _, observation = env.get_observation()
        return env, rng, observation

    def _remember(self, key: tuple, env: Any, rng: random.Random) -> None:
        self._cache[key] = (env, rng)
        self._cache.move_to_end(key)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)

    def _recall(self, key: tuple) -> tuple[Any, random.Random] | None:
        found = self._cache.get(key)
        if found is None:
            return None
        try:
            return copy.deepcopy(found)  # copies: repeats of one task (GRPO groups) share the entry
        except Exception:  # an uncopyable game is replayed instead
            self._cache.pop(key, None)
            return None


_SWAPPED_REWARD = re.compile(r"Invalid Move: (-?\d+(?:\.\d+)?(?:[eE]-?\d+)?)")


def _reward(closed: Any) -> tuple[float | None, str | None]:
    rewards, info = closed if isinstance(closed, tuple) else (closed, {})
    value = (rewards or {}).get(0)
    reason = str((info or {}).get(0, {}).get("reason", "")) or None
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return (None if value is None else float(value)), reason
    # textarena 0.7.4: Countdown, Cryptarithm, Slitherlink and ThreeCardMonte call
    # set_invalid_move(reward, reason) with the arguments swapped: the number is in the reason.
    swapped = _SWAPPED_REWARD.fullmatch(reason or "")
    if swapped:
        return float(swapped.group(1)), f"Invalid Move: {value}"
    raise TypeError(f"the game's reward is {value!r}, not a number")


def progress_credit(reward: float, start: float) -> float:
    """The game's reward less what it pays for the starting position, as a share of what was left
    to gain: 0 for an ending where no progress was made (however it ended), 1 for a solved game.
    A reward of 1 or more (solved, or a count such as Set's sets) and a game whose start pays
    nothing are left as the game gives them; so are penalties (Bandit's -1 for an invalid move)."""
    if start <= 0 or reward >= 1:
        return reward
    if start >= 1:
        return 0.0
    return max(0.0, (reward - start) / (1 - start))


class TAState(BaseModel):
    game_id: str
    seed: int
    start_reward: float = 0.0  # what the game pays if it ends before any valid move (progress_credit)
    actions: list[str] = Field(default_factory=list)
    done: bool = False
    reward: float | None = None
    reason: str | None = None


class TextArenaEnv(Environment):
    """One textarena game. Importing this module never imports textarena."""

    name = FAMILY
    description = "A textarena single-player game: play with `act`; the game's own reward."
    State = TAState
    reverify = "replay"

    def __init__(self, game: str, games: Games | None = None):
        self.game = game
        self.name = f"{FAMILY}/{game}"
        self.games = games or Games()

    def seed(self, task: TaskRow, rng: random.Random) -> tuple[TAState, str | None]:
        game_id = check_game_id(self.game, field_of(task, "game_id", str))
        seed = task.seed if task.seed is not None else rng.getrandbits(31)
        first = self._run(lambda: self.games.start(game_id, seed), "reset")
        start_reward = self._run(lambda: self.games.start_reward(game_id, seed), "reset")
        prompt = prompt_or_observation(task, first, what=f"{self.name} ({game_id}, seed {seed})")
        state = TAState(game_id=game_id, seed=seed, start_reward=start_reward)
        return state, (f"{prompt}\n\n{HOW_TO_PLAY}" if prompt is not None else None)

    @tool(blocking=True)
    def act(self, state: TAState, action: str) -> str:
        """Make one move in the game, written as the game asks (e.g. [Up] or [3 4])."""
        if state.done:
            raise ToolError("the game is over: reply with a short final message")
        if "[" not in action and "]" not in action:
            action = f"[{action.strip()}]"  # what textarena's own ActionFormattingWrapper does
        step = self._run(lambda: self.games.play(state.game_id, state.seed, [*state.actions, action]), "step")
        state.actions.append(action)
        if not step.done:
            return step.text or "ok"
        state.done, state.reward, state.reason = True, step.reward, step.reason
        reward = progress_credit(step.reward, state.start_reward) if step.reward is not None else None
        end = f"Game over ({step.reason or 'finished'}); reward {reward}. Reply with a short final message."
        return f"{step.text}\n{end}".strip()

    def verify(self, state: TAState, request: VerifyRequest) -> VerifyResult:
        # An unfinished game has no reward of its own (textarena gives None): it scores 0.
        game_reward = state.reward if state.done and state.reward is not None else 0.0
        return VerifyResult(
            reward=progress_credit(game_reward, state.start_reward) if state.done else 0.0,
            metrics={
                "finished": state.done,
                "moves": len(state.actions),
                "end": state.reason,
                "game_reward": game_reward,
                "start_reward": state.start_reward,
            },
        )

    def _run(self, call: Any, phase: str) -> Any:
        return call_library(self.name, phase, call)


def check_game_id(game: str, game_id: str | None) -> str:
    default = GAMES[game]
    if game_id is None or game_id == default:
        return default
    from textarena.envs.registration import ENV_REGISTRY

    accepted = [k for k in ENV_REGISTRY if k.startswith(default) and not k.endswith(("-train", "-raw"))]
    if game_id not in accepted:
        raise BadRequest(
            f"textarena/{game} has no variant {game_id!r}; accepted: {', '.join(accepted)}",
            component="env",
            field="game_id",
        )
    return game_id


def generate_tasks(game: str, n: int, seed: int, config: dict[str, Any] | None, split: str) -> list[dict[str, Any]]:
    """n rows of one split, deterministic for (n, seed, config); config may name a `game_id` variant."""
    env = f"{FAMILY}/{game}"
    check_n(n)
    want = check_split(split)
    for key in config or {}:
        if key != "game_id":
            raise BadRequest(
                f"{env} has no config field {key!r}; accepted: game_id", component="tasks", field=f"config.{key}"
            )
    game_id = check_game_id(game, (config or {}).get("game_id"))
    games, pool = Games(max_cached=0), 8 * n + 32

    def candidates():
        for i in range(pool):
            s = derive_seed("textarena", seed, i)
            first = games.start(game_id, s)
            key = f"{env}|{game_id}|{first}" + (f"|seed={s}" if game in SEED_IS_TASK else "")
            row = {
                "responses_create_params": {"input": [{"role": "user", "content": f"{first}\n\n{HOW_TO_PLAY}"}]},
                "env": env,
                "task_id": f"{env}-{want}-{seed}-{i}",
                "seed": s,
                "game_id": game_id,
            }
            yield key, row

    what = f"{env} ({'each seed is a task' if game in SEED_IS_TASK else 'a task is its starting position'})"
    return take(candidates(), n, want, what=what, scanned=f"{pool} seeds")


def environments() -> list[EnvSpec]:
    """The single-player games, and the two-player ones as multi-role environments."""
    from rollgate.resources_servers.families import textarena_duel  # it builds on this module

    reason = None if LIB.installed() else LIB.missing_reason()
    games = Games()  # one position cache for the family
    return textarena_duel.environments(reason) + [
        EnvSpec(
            name=f"{FAMILY}/{game}",
            env_class=TextArenaEnv,
            factory=functools.partial(TextArenaEnv, game, games),
            family=FAMILY,
            available=reason is None,
            reason=reason,
            tasks=functools.partial(generate_tasks, game),
        )
        for game in GAMES
    ]
