"""textarena's games of two or three players as multi-role environments: `textarena/<game>`,
roles `player_0`, `player_1` (and `player_2`), one tool `act` for every role (docs/roles.md).

As for the single-player games (families/textarena.py), the session keeps only the game's seed and
its actions; each call rebuilds the game by replaying them under the game's own generator, so any
replica can serve any call and nothing executable is read back from the store. textarena says
whose turn it is (`get_observation()`'s player id) and each player's view: what the game tells
one player is queued for that player alone and handed over by `observe`. The games shipped here
for two are zero-sum: a win is 1 against -1, a draw (or a game stopped unfinished) 0 each. The
three-player games (`PARTIES`) give textarena's rewards as they are (a win 1 and -1 for each other
player, or the loser of an invalid move -1 and the others 1): not zero-sum.
"""

from __future__ import annotations

import functools
import importlib
import random
from typing import Any

from pydantic import BaseModel, Field

from rollgate.core.errors import BadRequest
from rollgate.core.rows import derive_seed
from rollgate.core.schemas import TaskRow, VerifyRequest, VerifyResult
from rollgate.resources_servers.base import Environment, ToolError, tool
from rollgate.resources_servers.families.common import call_library, field_of
from rollgate.resources_servers.families.splits import check_n, check_split, take
from rollgate.resources_servers.families.textarena import (
    _GAME_LOCK,
    FAMILY,
    _isolated,
    _PrivateRandom,
    _text,
)
from rollgate.resources_servers.registry import EnvSpec

ROLES = ("player_0", "player_1")
# The two-player games that run offline and end with a win, a loss or a draw: textarena's
# set_winner / set_draw, or a ranking scaled to [-1, 1], all zero-sum for two players (docs/roles.md
# lists the ones left out and why).
DUELS: dict[str, str] = {
    g: f"{g}-v0"
    for g in [
        "Alquerque",
        "Battleship",
        "Breakthrough",
        "Briscola",
        "Chopsticks",
        "ColonelBlotto",
        "ConnectFour",
        "Crusade",
        "GameOfPureStrategy",
        "GermanWhist",
        "Golf",
        "HighSociety",
        "IndianPoker",
        "IteratedMatchingPennies",
        "IteratedPrisonersDilemma",
        "IteratedRockPaperScissors",
        "IteratedTwoThirdsAverage",
        "IteratedUltimatumGame",
        "KuhnPoker",
        "LiarsDice",
        "LinesOfAction",
        "MemoryGame",
        "NewRecruit",
        "Nim",
        "Othello",
        "PigDice",
        "Poker",
        "QuantumTicTacToe",
        "SantoriniBaseFixed",
        "SimpleBlindAuction",
        "SimpleNegotiation",
        "SimpleTak",
        "Snake",
        "SpiteAndMalice",
        "Stratego",
        "Surround",
        "Tak",
        "TicTacToe",
        "TruthAndDeception",
        "TwoDollar",
        "UltimateTicTacToe",
        "WildTicTacToe",
    ]
}
# Games of more than two players that run offline and end with rewards per player (docs/roles.md
# lists the ones left out and why): the number of players each is built for.
PARTIES: dict[str, int] = {
    "ThreePlayerTicTacToe": 3,
    "ThreePlayerGOPS": 3,
    "ThreePlayerIPD": 3,
    "Taboo": 4,  # two teams of two (textarena's smallest game of it)
    "SecretMafia": 6,  # hidden roles: each player learns its own from the game (its smallest game)
}
HOW_TO_PLAY = (
    "You play a {players}-player game {others}. On your turn, make exactly one move with the "
    "`act` tool, e.g. act(action='[your move]'), written as the game asks. The game's messages to you "
    "arrive as user messages."
)


def how_to_play(players: int) -> str:
    """The rows' prompt (a two-player game's unchanged from before the larger games)."""
    count = {2: "two", 3: "three", 4: "four", 6: "six"}.get(players, str(players))
    others = (
        "against another player"
        if players == 2
        else f"with {players - 1} other players (the game tells you who is on your side)"
    )
    return HOW_TO_PLAY.format(players=count, others=others)


def game_id_of(game: str) -> str:
    return DUELS.get(game) or f"{game}-v0"


class DuelState(BaseModel):
    game_id: str
    seed: int
    actions: list[str] = Field(default_factory=list)
    turn: str | None = None  # the role to move; None once the game is over
    inbox: dict[str, list[str]] = Field(default_factory=dict)  # what each role has not seen yet
    done: bool = False
    rewards: dict[str, float] | None = None
    reason: str | None = None


def _role(pid: int) -> str:
    return f"player_{pid}"


def _fresh(game_id: str, seed: int, players: int) -> tuple[Any, random.Random, int, str]:
    import textarena as ta
    from textarena.envs.registration import ENV_REGISTRY

    importlib.import_module(str(ENV_REGISTRY[game_id].entry_point).split(":")[0])
    rng = _PrivateRandom(seed)
    with _isolated(rng):
        env = ta.make(f"{game_id}-raw")
        env.reset(num_players=players, seed=seed)
        pid, observation = env.get_observation()
    return env, rng, pid, _text(observation)


def _rewards(closed: Any, players: int) -> tuple[dict[str, float], str | None]:
    rewards, info = closed if isinstance(closed, tuple) else (closed, {})
    reason = next((str(v.get("reason")) for v in (info or {}).values() if v.get("reason")), None)
    if not rewards:  # stopped unfinished (textarena gives None): a draw
        return {_role(p): 0.0 for p in range(players)}, reason
    return {_role(int(pid)): float(value) for pid, value in rewards.items()}, reason


def play(
    game_id: str, seed: int, actions: list[str], players: int = 2
) -> tuple[int | None, str, dict[str, float] | None, str | None]:
    """Replay `actions` -> (the player to move or None, what it sees, rewards when over, why it ended)."""
    with _GAME_LOCK:
        env, rng, pid, text = _fresh(game_id, seed, players)
        for i, action in enumerate(actions):
            with _isolated(rng):
                done, _ = env.step(action=action)
                if done:
                    if i != len(actions) - 1:
                        raise RuntimeError(f"replay diverged: the game ended at action {i}")
                    rewards, reason = _rewards(env.close(), players)
                    return None, "", rewards, reason
                pid, observation = env.get_observation()
            text = _text(observation)
        return pid, text, None, None


class TextArenaDuelEnv(Environment):
    """A two-player textarena game. Importing this module never imports textarena."""

    name = FAMILY
    description = "A textarena two-player game: roles player_0 and player_1 play with `act`; 1 / -1 / 0."
    State = DuelState
    roles = ROLES
    zero_sum = True
    reward_range = (-1.0, 1.0)

    def __init__(self, game: str):
        self.game = game
        self.name = f"{FAMILY}/{game}"

    def seed(self, task: TaskRow, rng: random.Random) -> DuelState:
        game_id = game_id_of(self.game)
        given = field_of(task, "game_id", str)
        if given is not None and given != game_id:
            raise BadRequest(f"{self.name} plays {game_id!r} only, not {given!r}", component="env", field="game_id")
        seed = task.seed if task.seed is not None else rng.getrandbits(31)
        pid, text, _, _ = self._run(lambda: play(game_id, seed, [], len(self.roles)), "reset")
        state = DuelState(game_id=game_id, seed=seed, turn=_role(pid), inbox={r: [] for r in self.roles})
        state.inbox[_role(pid)].append(text)
        return state

    def turn(self, state: DuelState) -> str | None:
        return state.turn

    def observe(self, state: DuelState, role: str) -> str:
        seen, state.inbox[role] = state.inbox.get(role, []), []
        return "\n\n".join(t for t in seen if t)

    @tool(blocking=True)
    def act(self, state: DuelState, action: str) -> str:
        """Make your move in the game, written as the game asks (e.g. [4] or [col 3])."""
        mover = state.turn
        if mover is None:
            raise ToolError("the game is over")
        if "[" not in action and "]" not in action:
            action = f"[{action.strip()}]"  # what textarena's own ActionFormattingWrapper does
        actions = [*state.actions, action]
        players = len(self.roles)
        pid, text, rewards, reason = self._run(lambda: play(state.game_id, state.seed, actions, players), "step")
        state.actions = actions
        if rewards is not None:
            state.turn, state.done, state.rewards, state.reason = None, True, rewards, reason
            for role in self.roles:
                state.inbox[role].append(f"Game over ({reason or 'finished'}); your reward: {rewards[role]:g}.")
            return f"Game over ({reason or 'finished'}). Reply with a short final message."
        state.turn = _role(pid)  # type: ignore[arg-type]
        if state.turn == mover:  # the game asks the mover again (e.g. an invalid move, a second step)
            return text or "ok"
        state.inbox[state.turn].append(text)
        return "Move made; the other player moves next." if players == 2 else f"Move made; {state.turn} moves next."

    def verify(self, state: DuelState, request: VerifyRequest) -> VerifyResult:
        role = request.role or ""
        # a game stopped unfinished (a turn budget ran out) is a draw: 0 each, still zero-sum
        reward = state.rewards[role] if state.done and state.rewards else 0.0
        return VerifyResult(
            reward=reward, metrics={"finished": state.done, "moves": len(state.actions), "end": state.reason}
        )

    def _run(self, call: Any, phase: str) -> Any:
        return call_library(self.name, phase, call)


@functools.cache
def party_class(players: int) -> type[TextArenaDuelEnv]:
    """The class of textarena's games of `players` players: the same session, replay and `act`,
    with a role per player; rewards as the game gives them, which need not add up to 0 (a win is
    1 against -1 for each other player, a team's win 1 for each of its players)."""
    roles = tuple(_role(p) for p in range(players))
    return type(
        f"TextArena{players}PlayerEnv",
        (TextArenaDuelEnv,),
        {
            "__module__": __name__,
            "__doc__": party_class.__doc__,
            "description": f"A textarena game of {players} players: roles {', '.join(roles)} play with `act`.",
            "roles": roles,
            "zero_sum": False,
        },
    )


def generate_tasks(game: str, n: int, seed: int, config: dict[str, Any] | None, split: str) -> list[dict[str, Any]]:
    """n rows of one split: each seed is a task (cards, ships and dice are dealt by the seed)."""
    env = f"{FAMILY}/{game}"
    check_n(n)
    want = check_split(split)
    for key in config or {}:
        raise BadRequest(f"{env} has no config field {key!r}", component="tasks", field=f"config.{key}")
    pool = 8 * n + 32
    players = PARTIES.get(game, 2)

    def candidates():
        for i in range(pool):
            s = derive_seed("textarena-duel", seed, i)
            row = {
                "responses_create_params": {"input": [{"role": "user", "content": how_to_play(players)}]},
                "env": env,
                "task_id": f"{env}-{want}-{seed}-{i}",
                "seed": s,
            }
            yield f"{env}|seed={s}", row

    return take(candidates(), n, want, what=f"{env} (each seed is a task)", scanned=f"{pool} seeds")


def environments(reason: str | None) -> list[EnvSpec]:
    """`reason`: why textarena cannot run here (None: it can), as the family found it."""
    return [
        EnvSpec(
            name=f"{FAMILY}/{game}",
            env_class=TextArenaDuelEnv,
            factory=functools.partial(TextArenaDuelEnv, game),
            family=FAMILY,
            available=reason is None,
            reason=reason,
            tasks=functools.partial(generate_tasks, game),
        )
        for game in DUELS
    ] + [
        EnvSpec(
            name=f"{FAMILY}/{game}",
            env_class=party_class(players),
            factory=functools.partial(party_class(players), game),
            family=FAMILY,
            available=reason is None,
            reason=reason,
            tasks=functools.partial(generate_tasks, game),
        )
        for game, players in PARTIES.items()
    ]
