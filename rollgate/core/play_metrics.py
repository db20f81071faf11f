"""Evaluation by play (docs/roles.md): win, draw and loss rates of multi-role episodes, per role
and per policy, with 95% bootstrap intervals over tasks. The one reduction that `rollgate eval
play` / `eval compare --env` (rollgate.evaluation) and the gateway's evaluation jobs with roles
(rollgate.gateway.evals) share, so both give the same numbers for the same episodes.

A role wins an episode when its reward is above every other role's, draws when level with the
best of the others, and loses otherwise. An episode with an error outcome (one role's
infrastructure failed: every role carries it) has no winner and is counted apart. Each task weighs
the same: a task's rate is the mean over its episodes, and the interval resamples tasks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rollgate.core.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, bootstrap_mean

RESULTS = ("win", "draw", "loss")
SCORE = {"win": 1.0, "draw": 0.5}  # the score of chess: a win 1, a draw 1/2


@dataclass(frozen=True)
class Seat:
    """One role's part of one episode, as much of its trajectory as the statistics read."""

    role: str
    policy: str  # the model, and `@policy_version` where there is one
    reward: float | None
    ok: bool  # the outcome carries a reward (not an infrastructure failure)
    outcome: str
    task_id: str
    env: str


def policy_name(model: str, policy_version: str | None) -> str:
    return model + (f"@{policy_version}" if policy_version else "")


def result_of(seat: Seat, episode: Sequence[Seat]) -> str:
    """'win', 'draw' or 'loss' of `seat` against the other roles of its (rewarded) episode."""
    best_other = max(float(o.reward) for o in episode if o is not seat)  # type: ignore[arg-type]
    mine = float(seat.reward)  # type: ignore[arg-type]
    return "win" if mine > best_other else "draw" if mine == best_other else "loss"


def rates(per_task: dict[str, list[str]], resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> dict:
    """Win, draw and loss rates and the score, each a mean over tasks with its interval."""
    out: dict[str, Any] = {"episodes": sum(len(v) for v in per_task.values()), "tasks": len(per_task)}
    for name in RESULTS:
        values = [sum(r == name for r in rs) / len(rs) for rs in per_task.values()]
        est = bootstrap_mean(values, resamples=resamples, seed=seed)
        out[name] = est.as_dict() if est else None
    scores = [sum(SCORE.get(r, 0.0) for r in rs) / len(rs) for rs in per_task.values()]
    est = bootstrap_mean(scores, resamples=resamples, seed=seed)
    out["score"] = est.as_dict() if est else None
    return out


def play_summary(
    episodes: Iterable[Sequence[Seat]], *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED
) -> dict[str, Any]:
    """Per role and per policy: win / draw / loss rates and the score, each with its interval;
    `head_to_head` when exactly two policies met (the second named against the first)."""
    by_role: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    by_policy: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    failures: dict[str, int] = defaultdict(int)
    envs: set[str] = set()
    meetings: set[tuple[str, ...]] = set()
    for episode in episodes:
        envs.add(episode[0].env)
        if not all(s.ok for s in episode) or len(episode) < 2:
            failures[episode[0].outcome] += 1
            continue
        policies = {s.policy for s in episode}
        meetings.add(tuple(sorted(policies)))
        for s in episode:
            result = result_of(s, episode)
            by_role[s.role][s.task_id].append(result)
            if len(policies) > 1:  # self-play says nothing about one policy against another
                by_policy[s.policy][s.task_id].append(result)
    report: dict[str, Any] = {
        "envs": sorted(envs),
        "roles": {role: rates(tasks, resamples, seed) for role, tasks in sorted(by_role.items())},
        "policies": {p: rates(tasks, resamples, seed) for p, tasks in sorted(by_policy.items())},
        "failures": dict(failures),
    }
    pairs = [m for m in meetings if len(m) == 2]
    if len(pairs) == 1 and len(by_policy) == 2:
        a, b = pairs[0]
        report["head_to_head"] = {"a": a, "b": b, **report["policies"][b]}
    return report
