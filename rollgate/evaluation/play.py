"""Evaluation by play (docs/roles.md): win, draw and loss rates of multi-role episodes, per role
and head to head between two policies, with 95% bootstrap intervals over tasks.

Input: the per-role trajectories of `rollgate collect --roles` (or the `episode` records of a job).
An episode counts once per role: a role wins when its reward is above every other role's, draws
when level with the best of the others, and loses otherwise (for a zero-sum game: 1, 0 or -1).
An episode with an error outcome (one role's infrastructure failed: every role carries it) has no
winner and is counted apart. Each task weighs the same: a task's rate is the mean over its episodes,
and the interval resamples tasks, as the other evaluation reports do (rollgate.core.stats).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rollgate.core import jsonutil
from rollgate.core.errors import BadRequest
from rollgate.core.schemas import Trajectory
from rollgate.core.stats import bootstrap_mean

RESULTS = ("win", "draw", "loss")


def policy_key(t: Trajectory) -> str:
    """A policy as the report names it: the model, and the policy version where there is one."""
    return t.policy.model + (f"@{t.policy.policy_version}" if t.policy.policy_version else "")


def read_trajectories(path: Path) -> list[Trajectory]:
    out = []
    for n, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if raw.strip():
            try:
                out.append(Trajectory.model_validate(jsonutil.loads(raw)))
            except ValueError as exc:
                raise BadRequest(
                    f"{path}: line {n} is not a trajectory: {exc}", component="eval", field="line"
                ) from None
    return out


def episodes_of(trajectories: Iterable[Trajectory]) -> dict[str, list[Trajectory]]:
    episodes: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        if t.episode_id is None or t.role is None:
            raise BadRequest(
                f"trajectory {t.trajectory_id} has no role: evaluation by play reads multi-role episodes "
                "(rollgate collect --roles)",
                component="eval",
                field="role",
            )
        episodes[t.episode_id].append(t)
    return episodes


def result_of(t: Trajectory, episode: list[Trajectory]) -> str:
    best_other = max(o.reward for o in episode if o is not t)  # type: ignore[type-var]
    return "win" if t.reward > best_other else "draw" if t.reward == best_other else "loss"  # type: ignore[operator]


def rates(per_task: dict[str, list[str]], resamples: int, seed: int) -> dict[str, Any]:
    """Win, draw and loss rates and the score, each a mean over tasks with its interval."""
    out: dict[str, Any] = {"episodes": sum(len(v) for v in per_task.values()), "tasks": len(per_task)}
    for name in RESULTS:
        values = [sum(r == name for r in rs) / len(rs) for rs in per_task.values()]
        est = bootstrap_mean(values, resamples=resamples, seed=seed)
        out[name] = est.as_dict() if est else None
    # the score of chess: a win 1, a draw 1/2
    scores = [sum({"win": 1.0, "draw": 0.5}.get(r, 0.0) for r in rs) / len(rs) for rs in per_task.values()]
    est = bootstrap_mean(scores, resamples=resamples, seed=seed)
    out["score"] = est.as_dict() if est else None
    return out


def play_report(trajectories: Iterable[Trajectory], *, resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Per role and per policy: win / draw / loss rates and the score, each with its interval;
    `head_to_head` when exactly two policies met (the second named against the first)."""
    by_role: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    by_policy: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    failures: dict[str, int] = defaultdict(int)
    envs: set[str] = set()
    meetings: set[tuple[str, ...]] = set()
    for episode in episodes_of(trajectories).values():
        envs.add(episode[0].task.env)
        if not all(t.ok for t in episode) or len(episode) < 2:
            failures[episode[0].outcome.value] += 1
            continue
        meetings.add(tuple(sorted({policy_key(t) for t in episode})))
        for t in episode:
            result = result_of(t, episode)
            by_role[t.role][t.task.task_id].append(result)  # type: ignore[index]
            if len({policy_key(o) for o in episode}) > 1:  # self-play says nothing about one policy against another
                by_policy[policy_key(t)][t.task.task_id].append(result)
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


def play_table(report: dict[str, Any]) -> str:
    def cell(x: dict[str, Any] | None) -> str:
        return "n/a" if x is None else f"{x['value']:.3f} [{x['ci'][0]:.3f}, {x['ci'][1]:.3f}]"

    lines = [f"{'':28} {'episodes':>8}  {'win':>22}  {'draw':>22}  {'loss':>22}"]
    for title, rows in (("role", report["roles"]), ("policy", report["policies"])):
        for name, r in rows.items():
            wdl = "  ".join(f"{cell(r[k]):>22}" for k in RESULTS)
            lines.append(f"{title + ' ' + name:28.28} {r['episodes']:>8}  {wdl}")
    h2h = report.get("head_to_head")
    if h2h:
        lines.append(
            f"head to head: {h2h['b']} against {h2h['a']}: score {cell(h2h['score'])} over {h2h['episodes']} games"
        )
    if report["failures"]:
        lines.append(
            "episodes without a result: " + ", ".join(f"{k} {v}" for k, v in sorted(report["failures"].items()))
        )
    return "\n".join(lines)
