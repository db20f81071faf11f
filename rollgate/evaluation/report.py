"""From samples to report.json: per environment and overall, mean reward, pass@k and majority@k
with bootstrap intervals over tasks, failures counted apart, breakdowns by tag; and the summary
table printed at the end of a run."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from rollgate.core.eval_metrics import MetricConfig, TaskResult, env_blocks
from rollgate.evaluation.samples import Sample

REPORT_SCHEMA_VERSION = 1
REPORT_KIND = "rollgate.eval.report"


def reduce_tasks(samples: Iterable[Sample], threshold: float) -> list[TaskResult]:
    by_task: dict[tuple[str, str], TaskResult] = {}
    for s in sorted(samples, key=lambda s: s.key):
        t = by_task.get((s.env, s.task_id))
        if t is None:
            t = by_task[(s.env, s.task_id)] = TaskResult(s.env, s.task_id, dict(s.tags))
        t.samples += 1
        if s.valid:
            assert s.reward is not None
            t.rewards.append(s.reward)
            t.correct.append(s.reward >= threshold)
            t.answers.append(s.answer)
        else:
            t.failures[s.outcome.value] += 1
    return list(by_task.values())


def model_of(samples: Sequence[Sample]) -> dict[str, Any]:
    """The model and policy version the samples came from (several when a run was resumed
    under another one: listed, never hidden)."""
    names = sorted({s.model for s in samples if s.model})
    versions = sorted({s.policy_version for s in samples if s.policy_version})
    weights = sorted({s.weight_version for s in samples if s.weight_version})
    return {
        "name": names[0] if len(names) == 1 else (names or None),
        "policy_version": versions[0] if len(versions) == 1 else (versions or None),
        "weight_versions": weights,
    }


def build_report(
    samples: Iterable[Sample],
    cfg: MetricConfig,
    *,
    envs: Sequence[str] | None = None,
    expected_tasks: dict[str, int] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    samples = list(samples)
    tasks = reduce_tasks(samples, cfg.threshold)
    per_env, overall = env_blocks(tasks, cfg, envs=envs, expected_tasks=expected_tasks)
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "kind": REPORT_KIND,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "model": model_of(samples),
        "config": cfg.as_dict(),
        **(extra or {}),
        "envs": per_env,
        "overall": overall,
    }


def _fmt(metric: dict[str, Any] | None) -> str:
    if not metric:
        return "n/a"
    lo, hi = metric["ci"]
    return f"{metric['value']:.3f} [{lo:.3f}, {hi:.3f}]"


def summary_table(report: dict[str, Any]) -> str:
    """A fixed-width table: one line per environment and one overall."""
    cfg = report["config"]
    k_max = max(cfg["pass_k"])
    cols = ["mean reward", "pass@1", f"pass@{k_max}"] if k_max > 1 else ["mean reward", "pass@1"]
    keys = ["mean_reward", "pass@1", f"pass@{k_max}"][: len(cols)]
    head = ["env", "tasks", "samples", "failed", f"<{cfg['k']} valid", *cols, f"majority@{k_max}"]
    rows = []
    for name, block in [*report["envs"].items(), ("overall", report["overall"])]:
        rows.append(
            [
                name,
                str(block["tasks"]),
                str(block["samples"]),
                str(block["failed_samples"]),
                str(block["tasks_short_of_k"]),
                *(_fmt(block.get(k)) for k in keys),
                _fmt(block.get(f"majority@{k_max}")),
            ]
        )
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in [head, *rows]
    ]
    model = report.get("model") or {}
    title = f"model {model.get('name')}  policy_version {model.get('policy_version')}  correct: {cfg['correct']}"
    return "\n".join([title, *lines, "95% bootstrap intervals over tasks; failed samples are excluded, not wrong."])
