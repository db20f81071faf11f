"""`rollgate eval reverify SRC`: re-score stored trajectories with today's verifiers, no model
calls, so a verifier fix never needs new rollouts.

Each environment says how (`Environment.reverify`):
- "answer": seed a fresh session from the stored row, verify the stored final answer;
- "replay": seed, replay the stored tool calls in order (each output must equal the stored one,
  else the sample is reported as diverged, never scored), then verify;
- "never": verification needs live state that cannot be rebuilt: the command refuses, naming
  the environment.
Infrastructure failures stay failures. The new report lists every sample whose reward changed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollgate.core import jsonutil
from rollgate.core.errors import BadRequest, RollgateError
from rollgate.core.eval_metrics import MetricConfig, default_pass_k
from rollgate.core.items import output_text
from rollgate.core.schemas import ErrorInfo, ErrorKind, Outcome, Trajectory, VerifyRequest
from rollgate.evaluation.html import write_html
from rollgate.evaluation.report import build_report
from rollgate.evaluation.samples import COMPONENT, EvalDir, content_hash, read_trajectories, sample_of, task_tags
from rollgate.evaluation.tasks import env_class

CONCURRENCY = 8
MODEL_ITEMS = ("message", "reasoning", "function_call")


class Diverged(Exception):
    """A replayed tool call answered differently from the stored episode."""


def stored_final_text(messages: Sequence[dict[str, Any]]) -> str:
    """What the agent handed to verify as `response`: the text of the last model turn, when
    that turn called no tool (an episode cut off mid-calls had no final answer)."""
    tail: list[dict[str, Any]] = []
    for item in reversed(messages):
        kind = item.get("type", "message")
        if kind not in MODEL_ITEMS or (kind == "message" and item.get("role", "assistant") != "assistant"):
            break
        tail.append(item)
    tail.reverse()
    if any(i.get("type") == "function_call" for i in tail):
        return ""
    return output_text(tail)


async def reverify_one(rt: Any, mode: str, traj: Trajectory) -> Any:
    seeded = await rt.seed(traj.task.row)
    try:
        if mode == "replay":
            outputs = {
                i.get("call_id"): i.get("output") for i in traj.messages if i.get("type") == "function_call_output"
            }
            for n, item in enumerate(i for i in traj.messages if i.get("type") == "function_call"):
                name = item.get("name")
                if name not in rt.specs:
                    continue  # the agent answered an unknown tool itself; the environment never saw it
                out = await rt.call_tool(seeded.session_id, name, item.get("arguments", "{}"))
                stored = outputs.get(item.get("call_id") or item.get("id"))
                if stored is not None and stored != out.output:
                    raise Diverged(f"tool call {n} ({name}) answered differently on replay")
        request = VerifyRequest(response=stored_final_text(traj.messages), transcript=traj.messages)
        return await rt.verify(seeded.session_id, request)
    finally:
        await rt.close(seeded.session_id)


@dataclass
class ReverifyResult:
    report: dict[str, Any]
    changed: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)


def _source(src: Path) -> tuple[Path, dict[str, Any] | None]:
    if src.is_dir():
        d = EvalDir(src)
        if not d.trajectories.is_file():
            raise BadRequest(f"SRC {src}: no trajectories.jsonl in this directory", component=COMPONENT, field="SRC")
        report = jsonutil.loads(d.report_json.read_bytes()) if d.report_json.is_file() else None
        return d.trajectories, report
    if not src.is_file():
        raise BadRequest(f"SRC {src}: no such file or directory", component=COMPONENT, field="SRC")
    return src, None


def _modes(envs: Sequence[str]) -> dict[str, str]:
    modes = {}
    for name in envs:
        mode = getattr(env_class(name), "reverify", "never")
        if mode not in ("answer", "replay"):
            raise BadRequest(
                f"environment {name!r} cannot be re-verified: its verification needs live session state "
                f"(reverify = {mode!r}); run the evaluation again instead",
                component=COMPONENT,
                field="env",
            )
        modes[name] = mode
    return modes


async def _rescore(trajs: list[Trajectory], modes: dict[str, str], settings: Any) -> list[Any]:
    from rollgate.resources_servers.registry import registry_for
    from rollgate.resources_servers.server import make_runtime

    local = settings.model_copy(update={"redis_url": None})  # fresh in-memory sessions only
    registry = registry_for(local)
    runtimes = {name: make_runtime(local, name, registry=registry) for name in modes}
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(t: Trajectory) -> Any:
        if not t.outcome.has_reward:
            return None
        async with limit:
            try:
                return await reverify_one(runtimes[t.task.env], modes[t.task.env], t)
            except (Diverged, RollgateError) as exc:
                return exc

    try:
        return await asyncio.gather(*(one(t) for t in trajs))
    finally:
        for rt in runtimes.values():
            await rt.store.close()


def reverify(src: Path, out: Path, settings: Any, *, threshold: float | None = None) -> ReverifyResult:
    path, old_report = _source(src)
    latest: dict[tuple[str, str, int], Trajectory] = {}
    for t in read_trajectories(path):
        latest[(t.task.env, t.task.task_id, t.sample_index)] = t
    if not latest:
        raise BadRequest(f"SRC {src}: no trajectories to re-verify", component=COMPONENT, field="SRC")
    trajs = [latest[k] for k in sorted(latest)]
    envs = sorted({t.task.env for t in trajs})
    modes = _modes(envs)
    verdicts = asyncio.run(_rescore(trajs, modes, settings))

    old_cfg = (old_report or {}).get("config") or {}
    k = int(old_cfg.get("k") or max(t.sample_index for t in trajs) + 1)
    cfg = MetricConfig(
        k=k,
        pass_k=tuple(old_cfg.get("pass_k") or default_pass_k(k)),
        threshold=threshold if threshold is not None else float(old_cfg.get("threshold", 1.0)),
    )
    d = EvalDir(out)
    if d.samples.exists():
        raise BadRequest(
            f"--out {out} already holds samples.jsonl; choose another --out", component=COMPONENT, field="--out"
        )
    d.prepare_append()
    result = ReverifyResult(report={})
    samples, rows = [], {}
    for t, verdict in zip(trajs, verdicts, strict=True):
        new = t
        if isinstance(verdict, BaseException):
            info = verdict.info() if isinstance(verdict, RollgateError) else None
            message = info.message if info else str(verdict)
            result.errors.append(
                {"env": t.task.env, "task_id": t.task.task_id, "sample_index": t.sample_index, "error": message}
            )
            new = t.model_copy(
                update={
                    "outcome": Outcome.env_error,
                    "reward": None,
                    "reward_components": None,
                    "error": ErrorInfo(kind=ErrorKind.internal, component="verify", message=f"reverify: {message}"),
                }
            )
        elif verdict is not None:
            new = t.model_copy(
                update={
                    "reward": verdict.reward,
                    "reward_components": verdict.reward_components,
                    "metrics": {**t.metrics, **verdict.metrics},
                }
            )
            if abs(verdict.reward - (t.reward or 0.0)) > 1e-9:
                result.changed.append(
                    {
                        "env": t.task.env,
                        "task_id": t.task.task_id,
                        "sample_index": t.sample_index,
                        "old_reward": t.reward,
                        "new_reward": verdict.reward,
                    }
                )
        sample = sample_of(new, content=content_hash(t.task.row, t.task.env), tags=task_tags(t.task.row))
        d.append(new, sample)
        samples.append(sample)
        rows[(t.task.env, t.task.task_id)] = t.task.row
    d.write_tasks(rows.values())
    extra = {
        "reverify": {
            "source": str(src),
            "modes": modes,
            "samples": len(trajs),
            "changed": result.changed,
            "errors": result.errors,
        }
    }
    report = build_report(samples, cfg, envs=envs, extra=extra)
    if old_report and old_report.get("model"):
        report["model"] = old_report["model"]
    d.report_json.write_bytes(jsonutil.dumps(report))
    write_html(report, d.report_html)
    result.report = report
    return result
