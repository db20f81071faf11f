"""Train and eval splits that can never overlap, and task generation on top of them.

A task's split is a pure function of its *content key* (what makes two tasks the same task: the
question a dataset generates, a game's starting position, a shipped row without its id):
`split_of(key)` hashes the key, and one bit of the hash picks the split. Two rows with the same
content therefore always land in the same split, whatever seed or index produced them: the splits
are disjoint by construction, not by bookkeeping. Generators scan candidates in a fixed order and
keep those of the requested split (and each key once), so the output is deterministic for the seed.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any, Literal

from rollgate.core.errors import BadRequest

Split = Literal["train", "eval"]
SPLITS: tuple[Split, ...] = ("train", "eval")

# Shipped environments whose rows carry their whole task (question, secret word, mailbox): their
# `seed` is bookkeeping. For every other environment (game2048, plugins) the seed draws the task.
SEED_IS_BOOKKEEPING = frozenset({"math", "wordle", "workplace", "code"})


def split_of(key: str) -> Split:
    """The one split a content key belongs to: half the key space each."""
    return "eval" if hashlib.sha256(key.encode("utf-8")).digest()[0] & 1 else "train"


def check_split(split: str) -> Split:
    if split not in SPLITS:
        raise BadRequest(f"split must be one of {', '.join(SPLITS)}, got {split!r}", component="tasks", field="split")
    return split  # type: ignore[return-value]


def check_n(n: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise BadRequest(f"n must be a positive integer, got {n!r}", component="tasks", field="n")


def take(
    candidates: Iterable[tuple[str, dict[str, Any]]], n: int, split: Split, *, what: str, scanned: str
) -> list[dict[str, Any]]:
    """The first n rows of `split` among (key, row) candidates, each key once."""
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    other = 0  # distinct tasks of the other split, for the hint below
    for key, row in candidates:
        if key in seen:
            continue
        seen.add(key)
        if split_of(key) != split:
            other += 1
            continue
        rows.append({**row, "split": split})
        if len(rows) == n:
            return rows
    flip = "eval" if split == "train" else "train"
    hint = f"--split {flip} has {other} of them, " if other else ""
    raise BadRequest(
        f"{what}: only {len(rows)} distinct {split} tasks in {scanned}, asked for {n} "
        f"(its task space is small for this config: {hint}ask for fewer, or widen the config)",
        component="tasks",
        field="n",
    )


def row_key(env: str, row: dict[str, Any]) -> str:
    """A row's content: everything but its id, its reference solution, how its answer must be
    written (`answer_form`: its question says so already, and a row that gains the field stays the
    same task in the same split) and, where the row carries its whole task, its seed."""
    drop = {"task_id", "gold", "split", "env", "answer_form"} | ({"seed"} if env in SEED_IS_BOOKKEEPING else set())
    return env + "|" + canonical({k: v for k, v in row.items() if k not in drop})


def canonical(obj: Any) -> str:
    """One text per JSON value (sorted keys at every level): what content keys hash."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def generator_from_examples(cls: type) -> Callable[..., list[dict[str, Any]]] | None:
    """`rollgate tasks` for an environment whose module has `example_tasks(n, seed)` (the shipped
    five, and any plugin that follows the same convention)."""
    module = sys.modules.get(cls.__module__)
    example_tasks = getattr(module, "example_tasks", None)
    if example_tasks is None:
        return None

    def generate(n: int, seed: int, config: dict[str, Any] | None, split: str) -> list[dict[str, Any]]:
        env = cls.name
        if config:
            raise BadRequest(f"{env} takes no config (got keys {sorted(config)})", component="tasks", field="config")
        check_n(n)
        want = check_split(split)

        # example_tasks(m, seed) is deterministic: ask for more rows until the split holds n distinct
        # ones, or the bank stops growing (a fixed bank repeats past its size), or a cap is reached.
        m, previous = 2 * n + 16, -1
        while True:
            keyed = [(row_key(env, r), r) for r in example_tasks(m, seed)]
            distinct = {k for k, _ in keyed}
            enough = sum(split_of(k) == want for k in distinct) >= n
            if enough or len(distinct) == previous or m >= 64 * n + 4096:
                break
            previous, m = len(distinct), m * 2
        return take(keyed, n, want, what=env, scanned=f"the first {m} {env} tasks for seed {seed}")

    return generate
