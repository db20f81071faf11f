"""Wordle: find a secret five-letter word in at most six guesses.

Tool: `guess(word)` answers per-letter feedback: `G` right letter in the right place, `Y` in the
word elsewhere, `.` not in the word (beyond the copies already marked; duplicate letters are
scored like the original game: greens first, then yellows left to right while copies remain).
A word that is not five letters or not in the word list is an error output and costs no guess.

Reward (in `verify`, from the session state, not the text): solved in n guesses ->
`solved` 0.5 + `efficiency` 0.5 * (6 - n) / 5, i.e. 1.0 for one guess down to 0.5 for six;
not solved -> 0.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Annotated, Any

from pydantic import BaseModel, Field

from rollgate.core.schemas import TaskRow, VerifyRequest, VerifyResult
from rollgate.resources_servers.base import Environment, ToolError, tool
from rollgate.resources_servers.envs.wordle_words import WORD_SET, WORDS
from rollgate.verifiers.compose import weighted_sum

MAX_GUESSES = 6

INSTRUCTIONS = (
    "You are playing Wordle. Find the secret five-letter English word in at most 6 guesses using the "
    "`guess` tool. After each guess you get one feedback character per letter: G = right letter, right "
    "place; Y = the letter is in the word but elsewhere; . = the letter is not in the word (or not that "
    "many times). Guesses must be common five-letter words from the game's list; an invalid word is "
    "rejected without costing a guess. Fewer guesses earn more reward. When the game is over, reply "
    "with a final line `Answer: <word>`."
)


def feedback(guess: str, secret: str) -> str:
    """Per-letter feedback with the original game's duplicate-letter rule."""
    marks = ["."] * len(guess)
    remaining: Counter[str] = Counter()
    for i, (g, s) in enumerate(zip(guess, secret, strict=True)):
        if g == s:
            marks[i] = "G"
        else:
            remaining[s] += 1
    for i, g in enumerate(guess):
        if marks[i] != "G" and remaining[g] > 0:
            marks[i] = "Y"
            remaining[g] -= 1
    return "".join(marks)


class WordleState(BaseModel):
    secret: str
    guesses: list[str] = Field(default_factory=list)
    marks: list[str] = Field(default_factory=list)
    max_guesses: int = MAX_GUESSES

    @property
    def solved(self) -> bool:
        return bool(self.marks) and self.marks[-1] == "G" * 5

    @property
    def over(self) -> bool:
        return self.solved or len(self.guesses) >= self.max_guesses


class WordleEnv(Environment):
    name = "wordle"
    description = "Wordle: guess a five-letter word in six tries with G/Y/. feedback."
    State = WordleState
    reverify = "replay"

    def seed(self, task: TaskRow, rng: random.Random) -> tuple[WordleState, str]:
        secret = task.env_fields.get("secret")
        if secret is None:
            secret = rng.choice(WORDS)
        if not isinstance(secret, str) or secret.lower() not in WORD_SET:
            raise ValueError(f"secret must be a word of the word list, got {secret!r}")
        return WordleState(secret=secret.lower()), f"Guess the five-letter word. You have {MAX_GUESSES} guesses."

    @tool
    def guess(
        self, state: WordleState, word: Annotated[str, Field(max_length=64, description="a five-letter English word")]
    ) -> str:
        """Guess the secret word; returns per-letter feedback (G = right place, Y = elsewhere, . = absent)."""
        if state.over:
            raise ToolError("the game is over; no more guesses")
        w = word.strip().lower()
        if len(w) != 5 or not w.isalpha():
            raise ToolError(f"{word!r} is not a five-letter word; this guess was not counted")
        if w not in WORD_SET:
            raise ToolError(f"{w!r} is not in the word list; this guess was not counted")
        marks = feedback(w, state.secret)
        state.guesses.append(w)
        state.marks.append(marks)
        n = len(state.guesses)
        line = f"guess {n}/{state.max_guesses}: {w.upper()} -> {marks}"
        if state.solved:
            return f"{line}\nsolved in {n} guess{'es' if n > 1 else ''}!"
        if state.over:
            return f"{line}\nout of guesses; the word was {state.secret.upper()}"
        return f"{line} ({state.max_guesses - n} left)"

    def verify(self, state: WordleState, request: VerifyRequest) -> VerifyResult:
        n = len(state.guesses)
        metrics: dict[str, Any] = {"guesses": n, "solved": state.solved}
        if not state.solved:
            return weighted_sum({"solved": 0.0, "efficiency": 0.0}, metrics=metrics)
        return weighted_sum(
            {"solved": 1.0, "efficiency": (state.max_guesses - n) / (state.max_guesses - 1)},
            {"solved": 0.5, "efficiency": 0.5},
            metrics=metrics,
        )


# --- example data -------------------------------------------------------------------------------


def _letter_score(words: list[str]) -> dict[str, float]:
    freq = Counter(c for w in words for c in set(w))
    return {w: sum(freq[c] for c in set(w)) for w in words}


def solve(secret: str) -> list[str]:
    """A simple deterministic solver (most common distinct letters among the words still possible);
    it makes the gold guesses of the example rows."""
    candidates = list(WORDS)
    guesses: list[str] = []
    while len(guesses) < MAX_GUESSES:
        scores = _letter_score(candidates)
        pick = max(candidates, key=lambda w: (scores[w], w))
        guesses.append(pick)
        marks = feedback(pick, secret)
        if marks == "GGGGG":
            break
        candidates = [w for w in candidates if feedback(pick, w) == marks]
    return guesses


def example_tasks(n: int, seed: int) -> list[dict[str, Any]]:
    """`n` Wordle rows, deterministic for `seed`; each carries a solver's guesses as `gold`."""
    rng = random.Random(f"wordle:{seed}")
    rows: list[dict[str, Any]] = []
    pool = list(WORDS)
    rng.shuffle(pool)
    for secret in pool:
        if len(rows) >= n:
            break
        gold = solve(secret)
        if gold[-1] != secret:
            continue  # the solver failed this word; keep only rows whose gold path wins
        i = len(rows)
        rows.append(
            {
                "responses_create_params": {
                    "input": [
                        {"role": "system", "content": INSTRUCTIONS},
                        {"role": "user", "content": "A new game has started. Make your first guess."},
                    ]
                },
                "env": "wordle",
                "task_id": f"wordle-{seed}-{i:03d}",
                "seed": rng.getrandbits(31),
                "secret": secret,
                "gold": {
                    "calls": [{"name": "guess", "arguments": {"word": g}} for g in gold],
                    "response": f"Answer: {secret}",
                },
            }
        )
    return rows
