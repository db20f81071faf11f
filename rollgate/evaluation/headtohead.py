"""`rollgate eval compare A B --env GAME`: two policies play each other on a multi-role game and
the report gives A's score against B (a win 1, a draw 1/2) with a 95% bootstrap interval over
tasks, its win / draw / loss counts and rates, and a verdict (docs/evaluation.md).

Seats are balanced: every task is played `games` times with A in the first role and as many times
with A in the second, so neither policy gains from the first move. `--seats` pins A and B to one
role each instead (an asymmetric pair such as a solver and a grader). A game is an episode of the
roles loop (rollgate.agent_server.roles); who won is read from the roles' rewards as `rollgate eval
play` reads it. A game whose episode failed (an infrastructure error of either role) has no result:
it is counted apart, never as a win or a loss.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rollgate.agent_server.role_policy import check_policy
from rollgate.core.errors import BadRequest
from rollgate.core.schemas import EpisodeRecord, RolePolicy
from rollgate.core.stats import CONFIDENCE, DEFAULT_RESAMPLES, DEFAULT_SEED, paired_bootstrap
from rollgate.evaluation.play import RESULTS, rates, result_of
from rollgate.evaluation.samples import COMPONENT
from rollgate.evaluation.tasks import EvalTask

KIND = "rollgate.eval.head_to_head"
SCHEMA_VERSION = 1
SIDES = ("A", "B")


def parse_policy(text: str, side: str) -> RolePolicy:
    """A side's policy: a JSON object (RolePolicy: model, sampling, policy_version, ...), a JSON or
    YAML file holding one, or a bare model name. A bad field is named as `<side>.<field>`."""
    text = text.strip()
    if not text:
        raise BadRequest(f"{side}: empty; give a model name or a policy object", component=COMPONENT, field=side)
    data: Any
    if text[0] in "{[":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadRequest(f"{side}: not a JSON object: {exc}", component=COMPONENT, field=side) from None
    elif Path(text).suffix in (".json", ".yaml", ".yml"):
        path = Path(text)
        if not path.is_file():
            raise BadRequest(f"{side}: {path}: no such file", component=COMPONENT, field=side)
        data = yaml.safe_load(path.read_text())  # JSON is YAML
    else:
        data = {"model": text}
    if not isinstance(data, dict):
        raise BadRequest(f"{side}: a policy is an object, got {type(data).__name__}", component=COMPONENT, field=side)
    try:
        return RolePolicy.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in (side, *err["loc"]))
        raise BadRequest(f"{where}: {err['msg']}", component=COMPONENT, field=where) from None


def check_policies(policies: dict[str, RolePolicy], known_models: Sequence[str], default_model: str) -> None:
    """Each side's model is one the stack serves (its own or a `role_models` name)."""
    hint = f" (the stack's own model is {default_model!r}; others come from the setting role_models)"
    for side, policy in policies.items():
        check_policy(side, policy, known_models, component=COMPONENT, hint=hint)


def seatings(env: str, roles: Sequence[str], seats: str | None) -> list[tuple[str, str]]:
    """[(A's role, B's role)]: both ways round (balanced), or the one `--seats A_ROLE,B_ROLE`."""
    if not roles:
        raise BadRequest(
            f"--env: {env} has a single role: head-to-head games need a multi-role environment such as "
            "textarena/TicTacToe (rollgate envs lists each environment's roles); to compare two evaluations of "
            "a single-role environment, give two evaluation directories without --env",
            component=COMPONENT,
            field="--env",
        )
    if len(roles) != 2:
        raise BadRequest(
            f"--env: {env} has {len(roles)} roles ({', '.join(roles)}): head-to-head seats two policies, one per role",
            component=COMPONENT,
            field="--env",
        )
    if seats is None:
        return [(roles[0], roles[1]), (roles[1], roles[0])]
    chosen = [s.strip() for s in seats.split(",")]
    if len(chosen) != 2 or not all(chosen):
        raise BadRequest(
            f"--seats {seats!r}: give A's role and B's role, e.g. --seats {roles[0]},{roles[1]}",
            component=COMPONENT,
            field="--seats",
        )
    for role in chosen:
        if role not in roles:
            raise BadRequest(
                f"--seats: {env} has no role {role!r}; roles: {', '.join(roles)}", component=COMPONENT, field="--seats"
            )
    if chosen[0] == chosen[1]:
        raise BadRequest(
            f"--seats: A and B cannot both sit as {chosen[0]!r}; give one role each ({', '.join(roles)})",
            component=COMPONENT,
            field="--seats",
        )
    return [(chosen[0], chosen[1])]


@dataclass(frozen=True)
class Game:
    task: EvalTask
    a_role: str
    b_role: str
    index: int  # the game's number among this task's games in this seating
    others: tuple[str, ...] = ()  # more roles seated with B's policy (self-play of a game of three)

    def roles(self, policies: dict[str, RolePolicy]) -> dict[str, dict[str, Any]]:
        """The job's `roles`: each role mapped to the policy seated there."""
        a, b = (policies[side].model_dump(exclude_none=True, exclude_defaults=True) for side in SIDES)
        return {self.a_role: a, self.b_role: b, **{role: b for role in self.others}}


def check_games(games: int) -> None:
    if games < 1:
        raise BadRequest(f"--games must be >= 1, got {games}", component=COMPONENT, field="--games")


def plan(
    tasks: Sequence[EvalTask], seats: Sequence[tuple[str, str]], games: int, others: tuple[str, ...] = ()
) -> list[Game]:
    check_games(games)
    return [Game(t, a, b, i, others) for t in tasks for a, b in seats for i in range(games)]


def result_for_a(game: Game, record: EpisodeRecord) -> str | None:
    """'win', 'draw' or 'loss' from A's side; None when the episode has no result (a failure)."""
    trajs = record.trajectories
    if not trajs or not all(t.ok for t in trajs):
        return None
    mine = next((t for t in trajs if t.role == game.a_role), None)
    if mine is None or len(trajs) < 2:
        return None
    return result_of(mine, trajs)


def _counts(results: Sequence[str]) -> dict[str, int]:
    return {name: sum(r == name for r in results) for name in RESULTS}


@dataclass(frozen=True)
class Played:
    """One game as it ended: its episode, or (it never became one) the kind of its failure."""

    game: Game
    record: EpisodeRecord | None
    failure: str | None = None


def head_to_head_report(
    env: str,
    policies: dict[str, RolePolicy],
    default_model: str,
    played: Sequence[Played],
    *,
    planned: int,
    seats: Sequence[tuple[str, str]],
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    per_task: dict[str, list[str]] = defaultdict(list)
    per_seat: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    failures: dict[str, int] = defaultdict(int)
    for p in played:
        game = p.game
        result = None if p.record is None else result_for_a(game, p.record)
        if result is None:
            failures[p.failure or (p.record.outcome.value if p.record else "env_error")] += 1
            continue
        per_task[game.task.task_id].append(result)
        per_seat[game.a_role][game.task.task_id].append(result)
    all_results = [r for rs in per_task.values() for r in rs]
    a_block = rates(per_task, resamples, seed)
    verdict = "no result"
    test = None
    if per_task:
        scores = [sum({"win": 1.0, "draw": 0.5}.get(r, 0.0) for r in rs) / len(rs) for rs in per_task.values()]
        # A's score against an even match (1/2 per task): the paired test of the evaluation reports
        test = paired_bootstrap([0.5] * len(scores), scores, resamples=resamples, seed=seed)
        significant = test.p_value < 1.0 - CONFIDENCE
        verdict = (
            "A stronger"
            if significant and test.lo > 0
            else "B stronger"
            if significant and test.hi < 0
            else "no detectable difference"
        )

    def side(name: str) -> dict[str, Any]:
        p = policies[name]
        return {"model": p.model or default_model, "policy": p.model_dump(exclude_none=True, exclude_defaults=True)}

    return {
        "kind": KIND,
        "schema_version": SCHEMA_VERSION,
        "env": env,
        "a": side("A"),
        "b": side("B"),
        "seats": "balanced" if len(seats) == 2 else {"A": seats[0][0], "B": seats[0][1]},
        "bootstrap": {"resamples": resamples, "seed": seed, "confidence": CONFIDENCE, "over": "tasks"},
        "games": {"planned": planned, "with_result": len(all_results), "without_result": dict(failures)},
        "counts": _counts(all_results),  # A's wins, draws and losses
        "a_score": a_block["score"],  # A's win rate, a draw counting half
        "rates": {name: a_block[name] for name in RESULTS},
        "tasks": a_block["tasks"],
        "by_a_role": {
            role: {"counts": _counts([r for rs in tasks.values() for r in rs]), **rates(tasks, resamples, seed)}
            for role, tasks in sorted(per_seat.items())
        },
        "versus_even": None if test is None else {"diff": test.diff, "ci": [test.lo, test.hi], "p_value": test.p_value},
        "verdict": verdict,
    }


def head_to_head_table(report: dict[str, Any]) -> str:
    def cell(x: dict[str, Any] | None) -> str:
        return "n/a" if x is None else f"{x['value']:.3f} [{x['ci'][0]:.3f}, {x['ci'][1]:.3f}]"

    def who(side: dict[str, Any]) -> str:
        # what tells two policies of one model apart; a system prompt or metadata is too long for a line
        extra = {k: v for k, v in side["policy"].items() if k in ("policy_version", "sampling")}
        return side["model"] + (f" {json.dumps(extra, sort_keys=True)}" if extra else "")

    c, g = report["counts"], report["games"]
    lines = [
        f"A: {who(report['a'])}",
        f"B: {who(report['b'])}",
        f"{report['env']}: {g['with_result']} games over {report['tasks']} tasks, seats {report['seats']}",
        f"{'':18} {'games':>5}  {'win':>5} {'draw':>5} {'loss':>5}  {'A score (win + draw/2)':>24}",
        f"{'A overall':18} {sum(c.values()):>5}  {c['win']:>5} {c['draw']:>5} {c['loss']:>5}  "
        f"{cell(report['a_score']):>24}",
    ]
    for role, block in report["by_a_role"].items():
        rc = block["counts"]
        lines.append(
            f"{'A as ' + role:18.18} {sum(rc.values()):>5}  {rc['win']:>5} {rc['draw']:>5} {rc['loss']:>5}  "
            f"{cell(block['score']):>24}"
        )
    rates_line = ", ".join(f"{name} {cell(report['rates'][name])}" for name in RESULTS)
    lines.append(f"A's rates: {rates_line}")
    if g["without_result"]:
        failed = ", ".join(f"{k} {v}" for k, v in sorted(g["without_result"].items()))
        lines.append(f"games without a result (not counted): {failed}")
    lines.append(f"verdict: {report['verdict']} (95% bootstrap interval over tasks; an even match scores 0.500)")
    return "\n".join(lines)
