"""Evaluation during training: the report of a finished evaluation job, and the summary of
finished jobs per policy version (the learning curve as the service saw it).

A report has the shape of `rollgate eval`'s report.json (docs/evaluation.md): per environment and
overall, mean reward, pass@k and majority@k with 95% bootstrap intervals over tasks, failures
excluded and counted apart. The estimators are rollgate.core.stats, the ones `rollgate eval`
uses. A task is one row of the job; its samples are the row's repeats (k). A job with roles is
scored by play instead (rollgate.gateway.eval_play: each role's wins, draws and losses).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rollgate.core import jsonutil
from rollgate.core.errors import RollgateError
from rollgate.core.eval_metrics import MetricConfig, TaskResult, env_blocks
from rollgate.core.schemas import ErrorKind, Outcome
from rollgate.gateway.eval_play import REPORT_KIND as PLAY_KIND
from rollgate.gateway.eval_play import build_play_report, play_headline, report_head, slim_episode
from rollgate.jobs.queue import EvalOptions, JobProgress, JobQueue, decode_record

COMPONENT = "gateway"
REPORT_SCHEMA_VERSION = 1  # the same schema as rollgate.evaluation's report.json
REPORT_KIND = "rollgate.eval.report"
READ_BATCH = 1000
CACHE_SIZE = 256  # finished jobs never change: their reports are kept, newest used last
MAX_REPORTS_PER_SUMMARY = 50  # bounds the work of one summary call on a cold cache
REWARDED = {o.value for o in Outcome if o.has_reward}


class JobNotFinished(RollgateError):
    kind = ErrorKind.bad_request
    status = 409


class NoReport(JobNotFinished):
    """A training job has no report: the request is fine, the job is not of that kind (409)."""


@dataclass
class Collected:
    tasks: dict[int, TaskResult] = field(default_factory=dict)
    models: set[str] = field(default_factory=set)
    versions: set[str] = field(default_factory=set)
    weights: set[str] = field(default_factory=set)


def _answer(record: dict[str, Any]) -> str | None:
    """The verifier's comparable final answer (metrics.answer), as `rollgate eval` reads it."""
    value = (record.get("metrics") or {}).get("answer")
    if value is None or isinstance(value, (dict, list)):
        return None
    return str(value).strip() or None


def collect(records: Sequence[tuple[str, dict[str, Any]]], threshold: float, default_env: str | None) -> Collected:
    out = Collected()
    failures: list[dict[str, Any]] = []
    for kind, rec in records:
        if kind != "trajectory":
            failures.append(rec)  # a task that never became an episode: placed once rows are known
            continue
        task = rec.get("task") or {}
        row = rec.get("row_index")
        key = row if isinstance(row, int) else -1 - len(out.tasks)
        t = out.tasks.get(key)
        if t is None:
            t = out.tasks[key] = TaskResult(str(task.get("env") or default_env), str(task.get("task_id")), {})
        t.samples += 1
        reward = rec.get("reward")
        if rec.get("outcome") in REWARDED and reward is not None:
            t.rewards.append(float(reward))
            t.correct.append(float(reward) >= threshold)
            t.answers.append(_answer(rec))
        else:
            t.failures[str(rec.get("outcome"))] += 1
        policy = rec.get("policy") or {}
        if policy.get("model"):
            out.models.add(str(policy["model"]))
        if policy.get("policy_version"):
            out.versions.add(str(policy["policy_version"]))
        turns = rec.get("turns") or []
        if turns and turns[-1].get("weight_version"):
            out.weights.add(str(turns[-1]["weight_version"]))
    for rec in failures:
        row = rec.get("row_index")
        t = out.tasks.get(row) if isinstance(row, int) else None
        if t is None:
            key = row if isinstance(row, int) else -1 - len(out.tasks)
            t = out.tasks[key] = TaskResult(str(default_env or "unknown"), str(rec.get("task_id")), {})
        t.samples += 1
        t.failures["failed"] += 1
    return out


def _one_or_list(values: set[str], fallback: str | None) -> str | list[str] | None:
    if not values:
        return fallback
    return next(iter(values)) if len(values) == 1 else sorted(values)


def build_report(prog: JobProgress, records: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    opts = prog.eval or EvalOptions(k=1, pass_k=[1])
    got = collect(records, opts.threshold, prog.env)
    cfg = MetricConfig(k=opts.k, pass_k=tuple(opts.pass_k), threshold=opts.threshold)
    per_env, overall = env_blocks(list(got.tasks.values()), cfg)
    return {
        **report_head(prog, kind=REPORT_KIND, schema_version=REPORT_SCHEMA_VERSION),
        "model": {
            "name": _one_or_list(got.models, prog.model),
            "policy_version": prog.policy_version or _one_or_list(got.versions, None),
            "weight_versions": sorted(got.weights),
        },
        "config": cfg.as_dict(),
        "envs": per_env,
        "overall": overall,
    }


def slim(stored: bytes) -> tuple[str, dict[str, Any]]:
    """A stored record cut down to what the report reads (trajectories carry transcripts and
    token ids: a large job's report must not hold all of them at once)."""
    kind, raw = decode_record(stored)
    rec = jsonutil.loads(raw)
    if kind == "episode":
        return kind, slim_episode(rec)
    turns = rec.get("turns") or []
    answer = (rec.get("metrics") or {}).get("answer")
    return kind, {
        "row_index": rec.get("row_index"),
        "task_id": rec.get("task_id"),
        "task": {k: v for k, v in (rec.get("task") or {}).items() if k in ("env", "task_id")},
        "outcome": rec.get("outcome"),
        "reward": rec.get("reward"),
        "metrics": {"answer": answer} if answer is not None else {},
        "policy": {k: v for k, v in (rec.get("policy") or {}).items() if k in ("model", "policy_version")},
        "turns": [{"weight_version": turns[-1].get("weight_version")}] if turns else [],
        "failure": (rec.get("error") or {}).get("kind") if kind == "failure" else None,
    }


async def read_records(queue: JobQueue, job_id: str, total: int) -> list[tuple[str, dict[str, Any]]]:
    """Every record of the job, slimmed; parsing runs off the event loop, one batch at a time."""
    out: list[tuple[str, dict[str, Any]]] = []
    while len(out) < total:
        batch = await queue.results(job_id, len(out), READ_BATCH)
        if not batch:
            break
        out.extend(await asyncio.to_thread(lambda b=batch: [slim(x) for x in b]))
    return out


class EvalReports:
    """Reports of finished evaluation jobs, computed once per gateway process and kept (a
    finished job's records never change); the statistics run off the event loop."""

    def __init__(self, queue: JobQueue, *, cache_size: int = CACHE_SIZE):
        self.queue = queue
        self.cache_size = cache_size
        self._cache: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def cached(self, job_id: str) -> dict[str, Any] | None:
        report = self._cache.get(job_id)
        if report is not None:
            self._cache.move_to_end(job_id)
        return report

    async def report(self, job_id: str, prog: JobProgress | None = None) -> dict[str, Any]:
        hit = self.cached(job_id)
        if hit is not None:
            return hit
        prog = prog or await self.queue.progress(job_id)
        if prog.purpose != "eval":
            raise NoReport(
                f'purpose: job {job_id} is a training job; submit with "purpose": "eval" to get a report',
                component=COMPONENT,
                field="purpose",
            )
        if not prog.finished:
            raise JobNotFinished(
                f"job {job_id} is still running ({prog.done}/{prog.total} records); "
                "its report is ready when the job ends",
                component=COMPONENT,
                field="job_id",
            )
        records = await read_records(self.queue, job_id, prog.total)
        # a job with roles is scored by play (each role's wins, draws and losses), not by pass@k
        report = await asyncio.to_thread(build_play_report if prog.roles else build_report, prog, records)
        self._cache[job_id] = report
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return report

    async def summary(
        self, jobs: Sequence[JobProgress], *, max_reports: int = MAX_REPORTS_PER_SUMMARY
    ) -> dict[str, Any]:
        """Finished jobs grouped by policy version, in the order versions were first seen:
        training reward (the mean over records with a reward, as the jobs' progress counts it)
        and each evaluation job's headline metrics with their intervals."""
        finished = sorted((j for j in jobs if j.finished), key=lambda j: j.created_at)
        versions: dict[str | None, dict[str, Any]] = {}
        budget = max_reports
        for j in reversed(finished):  # newest first, so a cold cache spends its budget on recent evals
            v = versions.setdefault(j.policy_version, {"policy_version": j.policy_version, "first_seen": j.created_at})
            v["first_seen"] = min(v["first_seen"], j.created_at)
            if j.purpose == "eval":
                entry: dict[str, Any] = {"job_id": j.job_id, "created_at": j.created_at, "state": j.state}
                report = self.cached(j.job_id)
                why = "not computed (summary budget)"
                if report is None and budget > 0:
                    budget -= 1
                    try:
                        report = await self.report(j.job_id, j)
                    except RollgateError as exc:  # e.g. its records expired: one job must not sink the curve
                        why = f"unavailable: {exc.message}"
                if report is None:
                    entry["report"] = why
                else:
                    entry.update(play_headline(report) if report["kind"] == PLAY_KIND else headline(report))
                v.setdefault("eval", []).insert(0, entry)
            else:
                train = v.setdefault("train", {"jobs": 0, "records": 0, "rewarded": 0, "reward_sum": 0.0})
                train["jobs"] += 1
                train["records"] += j.done
                train["rewarded"] += j.rewarded
                train["reward_sum"] += (j.mean_reward or 0.0) * j.rewarded
        out = []
        for v in sorted(versions.values(), key=lambda v: v["first_seen"]):
            train = v.pop("train", None)
            if train is not None:
                total = train.pop("reward_sum")
                train["mean_reward"] = total / train["rewarded"] if train["rewarded"] else None
            out.append({**v, "train": train, "eval": v.get("eval", [])})
        return {
            "versions": out,
            "jobs": len(jobs),
            "finished_jobs": len(finished),
            "running_jobs": len(jobs) - len(finished),
        }


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """What the learning curve plots of one evaluation: mean reward, pass@1 and pass@k (the
    largest k), each {value, ci, tasks}, and the failure count."""
    overall = report["overall"]
    k_max = max(report["config"]["pass_k"])
    return {
        "k": report["config"]["k"],
        "threshold": report["config"]["threshold"],
        "model": report["model"]["name"],
        "mean_reward": overall.get("mean_reward"),
        "pass@1": overall.get("pass@1"),
        "pass_k": k_max,
        f"pass@{k_max}": overall.get(f"pass@{k_max}"),
        "samples": overall["samples"],
        "failed_samples": overall["failed_samples"],
        "envs": {
            name: {"mean_reward": b.get("mean_reward"), "pass@1": b.get("pass@1")} for name, b in report["envs"].items()
        },
    }
