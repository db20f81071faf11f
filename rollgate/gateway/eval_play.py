"""The report of a finished evaluation job with roles (docs/roles.md): per role and per policy,
the win / draw / loss rates and the score with 95% bootstrap intervals over tasks, the numbers
of `rollgate eval play` on the same episodes (both reduce through rollgate.core.play_metrics).
A task is one row of the job; its episodes are the row's repeats. An episode without a result
(an error outcome, or a task that never became an episode) is counted apart by its kind.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from rollgate.core.play_metrics import RESULTS, Seat, play_summary, policy_name
from rollgate.core.schemas import Outcome
from rollgate.core.stats import CONFIDENCE, DEFAULT_RESAMPLES, DEFAULT_SEED
from rollgate.jobs.queue import JobProgress

REPORT_SCHEMA_VERSION = 1
REPORT_KIND = "rollgate.eval.play"  # the kind of `rollgate eval`'s play.json
REWARDED = {o.value for o in Outcome if o.has_reward}


def report_head(prog: JobProgress, *, kind: str, schema_version: int) -> dict[str, Any]:
    """The opening of a finished job's report, either kind: its schema, when it finished, the job."""
    finished = prog.finished_at or prog.created_at
    return {
        "schema_version": schema_version,
        "kind": kind,
        "created_at": dt.datetime.fromtimestamp(finished, dt.UTC).isoformat(timespec="seconds"),
        "job": {
            "job_id": prog.job_id,
            "state": prog.state,
            "purpose": prog.purpose,
            "created_at": prog.created_at,
            "finished_at": prog.finished_at,
        },
    }


def slim_episode(rec: dict[str, Any]) -> dict[str, Any]:
    """An `episode` record cut down to what the report reads: each role's reward and policy."""
    trajectories = []
    for t in rec.get("trajectories") or []:
        turns = t.get("turns") or []
        trajectories.append(
            {
                "role": t.get("role"),
                "reward": t.get("reward"),
                "outcome": t.get("outcome"),
                "task": {k: v for k, v in (t.get("task") or {}).items() if k in ("env", "task_id")},
                "policy": {k: v for k, v in (t.get("policy") or {}).items() if k in ("model", "policy_version")},
                "weight_version": turns[-1].get("weight_version") if turns else None,
            }
        )
    return {"row_index": rec.get("row_index"), "outcome": rec.get("outcome"), "trajectories": trajectories}


def _seat(t: dict[str, Any], default_env: str | None, default_model: str | None) -> Seat:
    task, policy = t.get("task") or {}, t.get("policy") or {}
    return Seat(
        role=str(t.get("role")),
        policy=policy_name(str(policy.get("model") or default_model), policy.get("policy_version")),
        reward=t.get("reward"),
        ok=t.get("outcome") in REWARDED and t.get("reward") is not None,
        outcome=str(t.get("outcome")),
        task_id=str(task.get("task_id")),
        env=str(task.get("env") or default_env),
    )


def build_play_report(
    prog: JobProgress,
    records: Sequence[tuple[str, dict[str, Any]]],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    episodes: list[list[Seat]] = []
    without: dict[str, int] = {}
    models: set[str] = set()
    versions: set[str] = set()
    weights: set[str] = set()
    for kind, rec in records:
        if kind != "episode":
            why = rec.get("failure") or "failed"
            without[why] = without.get(why, 0) + 1
            continue
        seats = [_seat(t, prog.env, prog.model) for t in rec["trajectories"]]
        if not seats:
            continue
        episodes.append(seats)
        for t in rec["trajectories"]:
            policy = t.get("policy") or {}
            models.update([str(policy["model"])] if policy.get("model") else [])
            versions.update([str(policy["policy_version"])] if policy.get("policy_version") else [])
            weights.update([str(t["weight_version"])] if t.get("weight_version") else [])
    play = play_summary(episodes, resamples=resamples, seed=seed)
    for why, n in play["failures"].items():
        without[why] = without.get(why, 0) + n
    with_result = len(episodes) - sum(play["failures"].values())
    return {
        **report_head(prog, kind=REPORT_KIND, schema_version=REPORT_SCHEMA_VERSION),
        "model": {"name": sorted(models), "policy_version": sorted(versions), "weight_versions": sorted(weights)},
        "seats": prog.roles or {},  # each role's policy as the job gave it
        "config": {
            "k": prog.eval.k if prog.eval else prog.total,
            "scored_by": "play: a role wins when its reward is above every other role's, draws when level",
            "bootstrap": {"resamples": resamples, "seed": seed, "confidence": CONFIDENCE, "over": "tasks"},
        },
        "envs": play["envs"],
        "games": {"planned": prog.total, "with_result": with_result, "without_result": without},
        "roles": play["roles"],
        "policies": play["policies"],
        **({"head_to_head": play["head_to_head"]} if "head_to_head" in play else {}),
    }


def play_headline(report: dict[str, Any]) -> dict[str, Any]:
    """What the learning curve shows of one evaluation by play: each role's win, draw and loss
    rates and score (each {value, ci, tasks}), each policy's score where policies met."""

    def short(block: dict[str, Any]) -> dict[str, Any]:
        return {name: block.get(name) for name in (*RESULTS, "score")} | {"episodes": block["episodes"]}

    return {
        "kind": report["kind"],
        "k": report["config"]["k"],
        "model": report["model"]["name"],
        "roles": {role: short(b) for role, b in report["roles"].items()},
        "policies": {p: b.get("score") for p, b in report["policies"].items()},
        "games": report["games"],
    }
