"""Evaluation by play (docs/roles.md): win, draw and loss rates of multi-role episodes, per role
and head to head between two policies, with 95% bootstrap intervals over tasks (the statistics
are rollgate.core.play_metrics, which the gateway's evaluation jobs with roles use too).

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
from rollgate.core.play_metrics import RESULTS, Seat, play_summary, policy_name, rates
from rollgate.core.play_metrics import result_of as core_result_of
from rollgate.core.schemas import Trajectory

__all__ = [
    "RESULTS",
    "episodes_of",
    "play_report",
    "play_table",
    "policy_key",
    "rates",
    "read_trajectories",
    "result_of",
    "seat",
]


def policy_key(t: Trajectory) -> str:
    """A policy as the report names it: the model, and the policy version where there is one."""
    return policy_name(t.policy.model, t.policy.policy_version)


def seat(t: Trajectory) -> Seat:
    return Seat(
        role=str(t.role),
        policy=policy_key(t),
        reward=t.reward,
        ok=t.ok,
        outcome=t.outcome.value,
        task_id=t.task.task_id,
        env=t.task.env,
    )


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
    seats = [seat(o) for o in episode]
    return core_result_of(next(s for s, o in zip(seats, episode, strict=True) if o is t), seats)


def play_report(trajectories: Iterable[Trajectory], *, resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Per role and per policy: win / draw / loss rates and the score, each with its interval;
    `head_to_head` when exactly two policies met (the second named against the first)."""
    episodes = [[seat(t) for t in ep] for ep in episodes_of(trajectories).values()]
    return play_summary(episodes, resamples=resamples, seed=seed)


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
