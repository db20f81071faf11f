"""reasoning-gym as an environment family: `reasoning_gym/<dataset>`, one per procedural dataset.

A row names an entry instead of carrying it: `{"dataset": "chain_sum", "config": {...}, "seed": S,
"index": I}`; seeding regenerates the entry (rows stay small and never hold the answer), and the
state keeps only that recipe, so verify regenerates the same entry on any replica. A row may
instead carry a full `entry` ({question, answer, metadata}).

Reward: the dataset's own `score_answer` on the answer: the argument of the optional
`submit_answer` tool when the model called it, else the last <answer>...</answer> of its final
message, else that message. A dataset that raises while generating or scoring fails the episode
(env_error naming the dataset), never a reward of 0; except where a dataset's scorer is known to
raise on a malformed reply (`ANSWER_SHAPES`): such a reply is checked first and graded 0.0.

Where a dataset's scorer pays for a non-answer, Rollgate scores instead (`SCORER_FIXES`, each found
by `rollgate audit`, docs/audit.md); other reviewed holes are listed in the audit's allowlist.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import logging
import math
import random
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from rollgate.core.errors import BadRequest, RollgateError
from rollgate.core.schemas import TaskRow, VerifyRequest, VerifyResult
from rollgate.resources_servers.base import Environment, final_response_text, tool
from rollgate.resources_servers.families.common import (
    Library,
    extract_answer,
    field_of,
    library_failure,
    prompt_or_observation,
)
from rollgate.resources_servers.families.splits import canonical, check_n, check_split, take
from rollgate.resources_servers.registry import EnvSpec

log = logging.getLogger("rollgate.envs.reasoning_gym")

FAMILY = "reasoning_gym"
LIB = Library("reasoning_gym", "reasoning-gym")
CATALOG = Path(__file__).with_name("reasoning_gym_catalog.json")
SKIPPED = {
    "composite": "mixes other datasets named in a `datasets` config and has no default: "
    "run the member environments (one job may mix them) instead",
}
INSTRUCTION = "End your reply with the final answer inside <answer></answer> tags (or call submit_answer)."


def format_prompt(question: str) -> str:
    return f"{question}\n\n{INSTRUCTION}"


class RGState(BaseModel):
    dataset: str
    config: dict[str, Any] = Field(default_factory=dict)
    data_seed: int | None = None
    index: int | None = None
    entry: dict[str, Any] | None = None  # only for rows that carry a full entry
    submitted: str | None = None


def _halting_score(answer: str | None, entry: dict[str, Any]) -> float:
    """game_of_life_halting: reasoning-gym 0.1 compares `bool(answer) == bool(entry["answer"])`,
    true for any two non-empty strings, so every reply earned 1.0 (the audit's floor, "I don't
    know", did). The answer is the word True or False."""
    given = (answer or "").strip().strip(".").lower()
    return 1.0 if given == str(entry["answer"]).strip().lower() else 0.0


SCORER_FIXES = {"game_of_life_halting": _halting_score}


def _factors_shape(answer: str) -> str | None:
    """prime_factorization: its scorer int()s every ×-separated part and raises ValueError on any
    other text ("I don't know", a sentence), where a malformed answer is a wrong one."""
    for part in filter(None, (p.strip() for p in answer.split("×"))):
        try:
            int(part)
        except ValueError:
            return f"{part[:40]!r} is not an integer factor"
    return None


def _moves_shape(answer: str) -> str | None:
    """boxnet: its scorer pays 0.0 for a reply that is not JSON, but raises (TypeError,
    AttributeError) on JSON of another shape (a number, an object): a list of {agent: "move(...)"}."""
    try:
        moves = json.loads(answer)
    except ValueError:
        return None  # the scorer's own 0.0
    if isinstance(moves, list) and all(
        isinstance(m, dict) and all(isinstance(v, str) for v in m.values()) for m in moves
    ):
        return None
    return "JSON, but not a list of {agent: action} objects"


def _moves_listed(answer: str) -> str | None:
    """tower_of_hanoi: its scorer gives 0.0 to an empty answer but 0.05 (its credit for valid moves
    that do not solve the puzzle) to a blank one, which lists no move at all (the audit's
    tool_boundary_args submitted " \n\t")."""
    return None if answer.strip() else "a blank answer: no move"


# Datasets whose scorer raises on a malformed reply instead of grading it (or pays it): Rollgate
# checks the reply's shape first and grades a malformed one 0.0 (a wrong answer, the policy's
# failure, not an env_error that would hide it); a scorer that raises on a well-formed reply is
# still an error.
ANSWER_SHAPES = {"prime_factorization": _factors_shape, "boxnet": _moves_shape, "tower_of_hanoi": _moves_listed}


class ReasoningGymEnv(Environment):
    """One reasoning-gym dataset. Importing this module never imports reasoning_gym."""

    name = FAMILY
    description = "A reasoning-gym procedural dataset: answer the question; the dataset scores the answer."
    State = RGState
    reverify = "answer"

    def __init__(self, dataset: str):
        self.dataset = dataset
        self.name = f"{FAMILY}/{dataset}"

    def seed(self, task: TaskRow, rng: random.Random) -> tuple[RGState, str | None]:
        named = field_of(task, "dataset", str)
        if named is not None and named != self.dataset:
            raise BadRequest(
                f"row is for dataset {named!r}, this environment is {self.name!r}", component="env", field="dataset"
            )
        entry = field_of(task, "entry", dict)
        if entry is not None:
            if not isinstance(entry.get("question"), str) or "answer" not in entry:
                raise BadRequest("entry needs a string `question` and an `answer`", component="env", field="entry")
            state = RGState(dataset=self.dataset, config=field_of(task, "config", dict, {}), entry=entry)
        else:
            index = field_of(task, "index", int, 0)
            if index < 0:
                raise BadRequest(f"index must be >= 0, got {index}", component="env", field="index")
            data_seed = task.seed if task.seed is not None else rng.getrandbits(32)
            state = RGState(
                dataset=self.dataset, config=field_of(task, "config", dict, {}), data_seed=data_seed, index=index
            )
            entry = self._entry(state)
        prompt = prompt_or_observation(task, entry["question"], what=self.name)
        return state, (format_prompt(prompt) if prompt is not None else None)

    @tool
    def submit_answer(self, state: RGState, answer: str) -> str:
        """Submit your final answer to the question (the last submission counts)."""
        state.submitted = answer
        return "answer recorded; reply with a short final message to finish"

    def verify(self, state: RGState, request: VerifyRequest) -> VerifyResult:
        answer = state.submitted if state.submitted is not None else extract_answer(final_response_text(request))
        entry = self._entry(state)
        metrics: dict[str, Any] = {"submitted": state.submitted is not None, "answer_chars": len(answer)}
        shape = ANSWER_SHAPES.get(self.dataset)
        malformed = shape(answer) if shape else None
        if malformed:
            return VerifyResult(reward=0.0, metrics={**metrics, "malformed_answer": malformed})
        scorer = _dataset(self.name, self.dataset, canonical(state.config), state.data_seed or 0)
        try:
            fix = SCORER_FIXES.get(self.dataset)
            score = fix(answer, entry) if fix else scorer.score_answer(answer, entry)
        except Exception as exc:  # the dataset's own scorer failed: an environment failure
            raise library_failure(self.name, "score_answer", exc) from exc
        if not isinstance(score, (int, float)) or not math.isfinite(score):
            raise library_failure(self.name, "score_answer", TypeError(f"returned {score!r}, not a finite number"))
        return VerifyResult(reward=float(score), metrics=metrics)

    def reference_answer(self, state: RGState) -> str | None:
        """The dataset's own answer, where it has one (some datasets accept many answers)."""
        answer = self._entry(state).get("answer")
        return None if answer is None else str(answer)

    def _entry(self, state: RGState) -> dict[str, Any]:
        if state.entry is not None:
            return state.entry
        return _entry(self.name, self.dataset, canonical(state.config), state.data_seed or 0, state.index or 0)


# --- the library, imported on first use ------------------------------------------------------


def _registered() -> dict[str, tuple[type, type]]:
    from reasoning_gym.factory import DATASETS  # importing reasoning_gym registers every dataset

    return DATASETS


def make_config(env: str, dataset: str, config: dict[str, Any], data_seed: int) -> Any:
    """The dataset's config object, or BadRequest naming the field that is wrong."""
    _, config_cls = _registered()[dataset]
    accepted = [f.name for f in dataclasses.fields(config_cls) if f.name != "seed"]
    for key in config:
        if key == "seed":
            raise BadRequest(
                "the dataset seed is the row's `seed`, not a config key", component="env", field="config.seed"
            )
        if key not in accepted:
            raise BadRequest(
                f"{env} has no config field {key!r}; accepted: {', '.join(accepted)}",
                component="env",
                field=f"config.{key}",
            )
    try:
        cfg = config_cls(
            **config, **({"seed": data_seed} if "seed" in {f.name for f in dataclasses.fields(config_cls)} else {})
        )
        if callable(getattr(cfg, "validate", None)):
            cfg.validate()
    except (AssertionError, ValueError, TypeError) as exc:
        raise BadRequest(
            f"{env}: invalid config {config}: {exc or type(exc).__name__}", component="env", field="config"
        ) from None
    return cfg


@functools.lru_cache(maxsize=64)
def _dataset(env: str, dataset: str, config_json: str, data_seed: int) -> Any:
    config = make_config(env, dataset, json.loads(config_json), data_seed)
    dataset_cls, _ = _registered()[dataset]
    try:
        return dataset_cls(config=config)
    except RollgateError:
        raise
    except Exception as exc:
        raise library_failure(env, "generation", exc) from exc


@functools.lru_cache(maxsize=2048)
def _cached_entry(env: str, dataset: str, config_json: str, data_seed: int, index: int) -> dict[str, Any]:
    ds = _dataset(env, dataset, config_json, data_seed)
    if index >= len(ds):
        raise BadRequest(
            f"index {index} is past the dataset size {len(ds)} (set config.size)", component="env", field="index"
        )
    try:
        entry = ds[index]
    except Exception as exc:
        raise library_failure(env, "generation", exc) from exc
    if not isinstance(entry, dict) or not isinstance(entry.get("question"), str):
        raise library_failure(env, "generation", TypeError(f"entry {index} has no question"))
    return entry


def _entry(env: str, dataset: str, config_json: str, data_seed: int, index: int) -> dict[str, Any]:
    # a copy: scorers get an entry they may touch without changing the cached one
    return copy.deepcopy(_cached_entry(env, dataset, config_json, data_seed, index))


# --- tasks ----------------------------------------------------------------------------------


def generate_tasks(dataset: str, n: int, seed: int, config: dict[str, Any] | None, split: str) -> list[dict[str, Any]]:
    """n rows of one split, deterministic for (n, seed, config). The key of a task is its question."""
    env = f"{FAMILY}/{dataset}"
    check_n(n)
    want = check_split(split)
    cfg = dict(config or {})
    # A dataset's `size` can change its items (some draw all of them up front), so rows record it.
    pool = int(cfg.get("size") or 8 * n + 32)
    if "size" in {f.name for f in dataclasses.fields(_registered()[dataset][1])}:
        cfg["size"] = pool
    _dataset(env, dataset, canonical(cfg), seed)  # a bad config fails here, before any scanning

    def candidates():
        for i in range(pool):
            question = _cached_entry(env, dataset, canonical(cfg), seed, i)["question"]
            row = {
                "responses_create_params": {"input": [{"role": "user", "content": format_prompt(question)}]},
                "env": env,
                "task_id": f"{env}-{want}-{seed}-{i}",
                "seed": seed,
                "dataset": dataset,
                "config": cfg,
                "index": i,
            }
            yield f"{env}|{question}", row

    return take(candidates(), n, want, what=env, scanned=f"{pool} candidates (config.size) for seed {seed}")


# --- the family entry point -------------------------------------------------------------------


def dataset_names() -> tuple[list[str], str]:
    """Dataset names and where they came from, without importing the library when the catalog
    matches the installed version."""
    catalog = json.loads(CATALOG.read_text())
    installed = LIB.version() if LIB.installed() else None
    if installed is None or installed == catalog["version"]:
        return list(catalog["datasets"]), "catalog"
    log.info("reasoning-gym %s is not the catalogued %s: listing its datasets by import", installed, catalog["version"])
    return sorted(_registered()), "import"


def environments() -> list[EnvSpec]:
    names, _ = dataset_names()
    installed = LIB.installed()
    specs = []
    for dataset in names:
        reason = None if installed else LIB.missing_reason()
        reason = SKIPPED.get(dataset, reason)
        specs.append(
            EnvSpec(
                name=f"{FAMILY}/{dataset}",
                env_class=ReasoningGymEnv,
                factory=functools.partial(ReasoningGymEnv, dataset),
                family=FAMILY,
                available=reason is None,
                reason=reason,
                tasks=functools.partial(generate_tasks, dataset),
            )
        )
    return specs


def write_catalog() -> None:
    """Refresh the catalog from the installed library (run after upgrading reasoning-gym)."""
    names = sorted(_registered())
    about = json.loads(CATALOG.read_text())["_about"]
    body = {"_about": about, "version": LIB.version(), "datasets": names}
    CATALOG.write_text(json.dumps(body, indent=1) + "\n")


if __name__ == "__main__":
    write_catalog()
    print(f"wrote {CATALOG}")
