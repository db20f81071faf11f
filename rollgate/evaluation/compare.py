"""`rollgate eval compare A B`: a paired comparison of two evaluation directories on the tasks
both evaluated (same environment, task id and content), per environment and overall: B minus
A in mean reward and in pass@1, a paired bootstrap interval, a randomization-test p-value and a
plain verdict."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rollgate.core import jsonutil
from rollgate.core.errors import BadRequest
from rollgate.core.eval_metrics import TaskResult
from rollgate.core.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, paired_bootstrap
from rollgate.evaluation.report import REPORT_KIND, REPORT_SCHEMA_VERSION, reduce_tasks
from rollgate.evaluation.samples import COMPONENT, EvalDir, Sample, read_samples

METRICS = ("mean_reward", "pass@1")


def load_eval(path: Path, field: str) -> tuple[dict[str, Any], list[Sample]]:
    d = EvalDir(path)
    if not d.report_json.is_file() or not d.samples.is_file():
        raise BadRequest(
            f"{field} {path}: not an evaluation directory (report.json and samples.jsonl expected)",
            component=COMPONENT,
            field=field,
        )
    report = jsonutil.loads(d.report_json.read_bytes())
    if report.get("kind") != REPORT_KIND or report.get("schema_version") != REPORT_SCHEMA_VERSION:
        raise BadRequest(
            f"{field} {d.report_json}: schema_version {report.get('schema_version')!r} of kind "
            f"{report.get('kind')!r} is not a report this Rollgate reads ({REPORT_KIND} {REPORT_SCHEMA_VERSION})",
            component=COMPONENT,
            field="schema_version",
        )
    return report, list(read_samples(d.samples).values())


def _value(t: TaskResult, metric: str) -> float:
    return t.mean_reward if metric == "mean_reward" else t.pass_at(1)


def _paired(a: Sequence[TaskResult], b: Sequence[TaskResult], resamples: int, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {"tasks": len(a)}
    for metric in METRICS:
        result = paired_bootstrap(
            [_value(t, metric) for t in a], [_value(t, metric) for t in b], resamples=resamples, seed=seed
        )
        out[metric] = result.as_dict()
    return out


def compare(
    a_dir: Path,
    b_dir: Path,
    *,
    threshold: float | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    ra, sa = load_eval(a_dir, "A")
    rb, sb = load_eval(b_dir, "B")
    if threshold is None:
        ta, tb = ra["config"]["threshold"], rb["config"]["threshold"]
        if ta != tb:
            raise BadRequest(
                f"A counts reward >= {ta:g} as correct, B reward >= {tb:g}: pass --threshold to compare both alike",
                component=COMPONENT,
                field="--threshold",
            )
        threshold = float(ta)
    content_a = {(s.env, s.task_id): s.content_hash for s in sa}
    content_b = {(s.env, s.task_id): s.content_hash for s in sb}
    common = sorted(k for k in content_a if k in content_b and content_a[k] == content_b[k])
    if not common:
        envs_a = sorted({e for e, _ in content_a})
        envs_b = sorted({e for e, _ in content_b})
        raise BadRequest(
            f"A ({a_dir}: {len(content_a)} tasks of {', '.join(envs_a) or 'none'}) and B ({b_dir}: "
            f"{len(content_b)} tasks of {', '.join(envs_b) or 'none'}) have no task in common",
            component=COMPONENT,
            field="A, B",
        )
    tasks_a = {(t.env, t.task_id): t for t in reduce_tasks(sa, threshold)}
    tasks_b = {(t.env, t.task_id): t for t in reduce_tasks(sb, threshold)}
    scored = [k for k in common if tasks_a[k].valid and tasks_b[k].valid]
    envs: dict[str, Any] = {}
    for env in sorted({e for e, _ in scored}):
        keys = [k for k in scored if k[0] == env]
        envs[env] = _paired([tasks_a[k] for k in keys], [tasks_b[k] for k in keys], resamples, seed)
    overall = _paired([tasks_a[k] for k in scored], [tasks_b[k] for k in scored], resamples, seed) if scored else None
    same_id = sum(1 for k in content_a if k in content_b)
    return {
        "kind": "rollgate.eval.compare",
        "a": {"dir": str(a_dir), "model": ra.get("model")},
        "b": {"dir": str(b_dir), "model": rb.get("model")},
        "threshold": threshold,
        "bootstrap": {"resamples": resamples, "seed": seed, "confidence": 0.95, "over": "tasks (paired)"},
        "tasks": {
            "common": len(common),
            "compared": len(scored),
            "without_valid_samples": len(common) - len(scored),
            "content_differs": same_id - len(common),
            "only_in_a": len(content_a) - same_id,
            "only_in_b": len(content_b) - same_id,
        },
        "envs": envs,
        "overall": overall,
    }


def compare_table(result: dict[str, Any]) -> str:
    head = ["env", "metric", "tasks", "A", "B", "B-A", "95% CI", "p", "verdict"]
    rows = []
    blocks = [*result["envs"].items(), *([("overall", result["overall"])] if result["overall"] else [])]
    for env, block in blocks:
        for metric in METRICS:
            m = block[metric]
            lo, hi = m["ci"]
            rows.append(
                [
                    env,
                    metric,
                    str(block["tasks"]),
                    f"{m['a']:.3f}",
                    f"{m['b']:.3f}",
                    f"{m['diff']:+.3f}",
                    f"[{lo:+.3f}, {hi:+.3f}]",
                    f"{m['p_value']:.4f}",
                    m["verdict"],
                ]
            )
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        "  ".join(c.ljust(w) if i in (0, 1, 8) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in [head, *rows]
    ]
    t = result["tasks"]
    a, b = result["a"]["model"] or {}, result["b"]["model"] or {}
    return "\n".join(
        [
            f"A: {result['a']['dir']} (model {a.get('name')}, policy_version {a.get('policy_version')})",
            f"B: {result['b']['dir']} (model {b.get('name')}, policy_version {b.get('policy_version')})",
            *lines,
            f"{t['compared']} tasks compared; left out: {t['without_valid_samples']} without valid samples on a side, "
            f"{t['content_differs']} with the same id but other content, {t['only_in_a']} only in A, "
            f"{t['only_in_b']} only in B.",
        ]
    )
