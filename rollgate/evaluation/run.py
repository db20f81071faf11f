"""`rollgate eval` as a function: check the inputs, resolve the tasks, run the samples still
missing through a Source, append each as it finishes, then write the report.

Resume: with `resume=True` an existing directory is continued: samples with a valid outcome
are kept, failed ones (infrastructure failures) are run again, the rest are run. The run's
settings (environments, k, tasks, sampling, policy version) must match those it started with.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollgate.core import jsonutil
from rollgate.core.errors import BadRequest
from rollgate.core.eval_metrics import MetricConfig
from rollgate.core.schemas import Trajectory
from rollgate.evaluation.html import write_html
from rollgate.evaluation.report import build_report
from rollgate.evaluation.samples import COMPONENT, EvalDir, read_samples, sample_of
from rollgate.evaluation.sources import SampleRequest, Source
from rollgate.evaluation.tasks import (
    EvalTask,
    check_envs,
    check_threshold,
    generate_tasks,
    load_task_file,
    train_overlap,
)

log = logging.getLogger("rollgate.eval")

RUN_SCHEMA_VERSION = 1
EXIT_TOO_MANY_FAILURES = 3


@dataclass
class EvalOptions:
    envs: list[str]
    out: Path
    k: int
    metrics: MetricConfig
    tasks_file: Path | None = None
    n: int | None = None
    seed: int | None = None
    split: str | None = None
    max_failure_fraction: float = 0.1
    resume: bool = False
    train_tasks: Path | None = None
    strict: bool = False
    sampling: dict[str, Any] = field(default_factory=dict)
    policy_version: str | None = None


@dataclass
class EvalResult:
    report: dict[str, Any]
    exit_code: int
    skipped_rows: int = 0
    overlap: list[EvalTask] = field(default_factory=list)
    ran: int = 0
    kept: int = 0


def check_options(opts: EvalOptions) -> None:
    """Inputs that need no environment: each error names its flag."""
    if not opts.envs:
        raise BadRequest("at least one --env is required", component=COMPONENT, field="--env")
    if opts.k < 1:
        raise BadRequest(f"--k must be >= 1, got {opts.k}", component=COMPONENT, field="--k")
    for k in opts.metrics.pass_k:
        if k < 1:
            raise BadRequest(f"--pass-k: k={k} must be >= 1", component=COMPONENT, field="--pass-k")
        if k > opts.k:
            raise BadRequest(
                f"--pass-k: k={k} is larger than the number of samples per task (--k {opts.k})",
                component=COMPONENT,
                field="--pass-k",
            )
    if (opts.tasks_file is None) == (opts.n is None):
        raise BadRequest("give either --tasks FILE or --n N --seed S", component=COMPONENT, field="--tasks")
    if opts.n is not None and opts.seed is None:
        raise BadRequest("--n needs --seed (generated tasks must be reproducible)", component=COMPONENT, field="--seed")
    if opts.split is not None and opts.tasks_file is not None:
        raise BadRequest(
            "--split applies to generated tasks (--n), not to --tasks", component=COMPONENT, field="--split"
        )
    if not 0.0 <= opts.max_failure_fraction <= 1.0:
        raise BadRequest(
            f"--max-failure-fraction must lie in [0, 1], got {opts.max_failure_fraction}",
            component=COMPONENT,
            field="--max-failure-fraction",
        )
    if opts.strict and opts.train_tasks is None:
        raise BadRequest("--strict needs --train-tasks FILE", component=COMPONENT, field="--strict")


def resolve_tasks(opts: EvalOptions) -> tuple[list[EvalTask], int]:
    if opts.tasks_file is not None:
        tasks, skipped = load_task_file(opts.tasks_file, opts.envs)
    else:
        assert opts.n is not None and opts.seed is not None
        tasks, skipped = generate_tasks(opts.envs, opts.n, opts.seed, opts.split), 0
    if not tasks:
        raise BadRequest(
            f"no task for {', '.join(opts.envs)} in --tasks {opts.tasks_file}", component=COMPONENT, field="--tasks"
        )
    return tasks, skipped


def _run_record(opts: EvalOptions, tasks: list[EvalTask]) -> dict[str, Any]:
    digest = hashlib.sha256("\n".join(sorted(f"{t.env}/{t.task_id}/{t.content}" for t in tasks)).encode())
    source = (
        {"file": str(opts.tasks_file)} if opts.tasks_file else {"n": opts.n, "seed": opts.seed, "split": opts.split}
    )
    return {
        "schema_version": RUN_SCHEMA_VERSION,
        "envs": list(opts.envs),
        "k": opts.k,
        "tasks": digest.hexdigest(),
        "task_source": source,
        "sampling": opts.sampling,
        "policy_version": opts.policy_version,
    }


def _check_resume(d: EvalDir, record: dict[str, Any], resume: bool) -> None:
    if not d.samples.exists():
        return
    if not resume:
        raise BadRequest(
            f"--out {d.root} already holds samples.jsonl: pass --resume to continue that run, or choose another --out",
            component=COMPONENT,
            field="--out",
        )
    if not d.run.exists():
        raise BadRequest(
            f"--resume: {d.run} is missing; cannot check what the run was", component=COMPONENT, field="--out"
        )
    before = jsonutil.loads(d.run.read_bytes())
    names = {
        "envs": "--env",
        "k": "--k",
        "tasks": "--tasks",
        "sampling": "sampling",
        "policy_version": "--policy-version",
    }
    for key, flag in names.items():
        if before.get(key) != record[key]:
            what = "the task set" if key == "tasks" else f"{before.get(key)!r} then, {record[key]!r} now"
            raise BadRequest(
                f"--resume: {flag} differs from the run in {d.root} ({what})", component=COMPONENT, field=flag
            )


def run_eval(
    opts: EvalOptions,
    source: Source,
    *,
    on_total: Callable[[int], None] | None = None,
    on_sample: Callable[[Any], None] | None = None,
) -> EvalResult:
    check_options(opts)
    check_envs(opts.envs, source.known_envs())
    check_threshold(opts.metrics.threshold, opts.envs)
    tasks, skipped = resolve_tasks(opts)
    overlap: list[EvalTask] = []
    if opts.train_tasks is not None:
        overlap = train_overlap(tasks, opts.train_tasks)
        if overlap and opts.strict:
            ids = ", ".join(f"{t.env}/{t.task_id}" for t in overlap[:5])
            raise BadRequest(
                f"--strict: {len(overlap)} eval task(s) also appear in --train-tasks {opts.train_tasks} (by content "
                f"hash): {ids}{' ...' if len(overlap) > 5 else ''}",
                component=COMPONENT,
                field="--train-tasks",
            )
        if overlap:
            log.warning("%d eval task(s) also appear in the training file %s", len(overlap), opts.train_tasks)

    d = EvalDir(opts.out)
    record = _run_record(opts, tasks)
    _check_resume(d, record, opts.resume)
    d.prepare_append()
    d.run.write_bytes(jsonutil.dumps(record))
    d.write_tasks(t.row for t in tasks)

    done = {key for key, s in (read_samples(d.samples) if d.samples.exists() else {}).items() if s.valid}
    todo = [SampleRequest(t, i) for t in tasks for i in range(opts.k) if (t.env, t.task_id, i) not in done]
    if on_total:
        on_total(len(todo))

    def on_result(req: SampleRequest, traj: Trajectory) -> None:
        sample = sample_of(traj, content=req.task.content, tags=req.task.tags, sample_index=req.sample_index)
        # The row as submitted identifies the task, whatever id the runner derived.
        sample = sample.model_copy(update={"env": req.task.env, "task_id": req.task.task_id})
        d.append(traj, sample)
        if on_sample:
            on_sample(sample)

    source.run(todo, on_result, sampling=opts.sampling, policy_version=opts.policy_version)
    result = finish(d, opts, tasks, overlap)
    result.skipped_rows, result.ran, result.kept = skipped, len(todo), len(done)
    return result


def finish(d: EvalDir, opts: EvalOptions, tasks: list[EvalTask], overlap: list[EvalTask]) -> EvalResult:
    """Write report.json and report.html from what samples.jsonl holds for these tasks."""
    wanted = {(t.env, t.task_id) for t in tasks}
    samples = [s for s in read_samples(d.samples).values() if (s.env, s.task_id) in wanted and s.sample_index < opts.k]
    expected: dict[str, int] = {}
    for t in tasks:
        expected[t.env] = expected.get(t.env, 0) + 1
    extra = {
        "run": {
            "task_source": _run_record(opts, tasks)["task_source"],
            "sampling": opts.sampling,
            "max_failure_fraction": opts.max_failure_fraction,
        },
        "train_overlap": {
            "file": str(opts.train_tasks) if opts.train_tasks else None,
            "tasks": [f"{t.env}/{t.task_id}" for t in overlap],
        },
    }
    report = build_report(samples, opts.metrics, envs=opts.envs, expected_tasks=expected, extra=extra)
    if opts.policy_version and not report["model"]["policy_version"]:
        report["model"]["policy_version"] = opts.policy_version
    fraction = report["overall"]["failure_fraction"]
    code = EXIT_TOO_MANY_FAILURES if fraction > opts.max_failure_fraction else 0
    report["failure_check"] = {
        "failure_fraction": fraction,
        "max_failure_fraction": opts.max_failure_fraction,
        "passed": code == 0,
    }
    d.report_json.write_bytes(jsonutil.dumps(report))
    write_html(report, d.report_html)
    return EvalResult(report=report, exit_code=code, overlap=overlap)
