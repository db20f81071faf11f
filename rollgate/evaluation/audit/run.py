"""`rollgate audit` as a function: for each environment, N generated tasks; for each probe, the
scripted replies of those tasks, run as episodes through a Source (the embedded stack, as
`rollgate eval` does); then each probe's mean reward, interval and verdict.

Nothing a probe or an environment does stops the audit: an unknown environment or probe, a probe
that raises or writes a bad script, an environment that fails to load or errors under a probe,
each becomes an `error` entry (typed, with the message) in the report."""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rollgate.core.errors import BadRequest, RollgateError
from rollgate.core.schemas import Trajectory
from rollgate.evaluation.audit.probes import ProbeContext, ProbeSet, check_script, load_probes
from rollgate.evaluation.audit.verdict import EPS, FLAGGED, MIN_EFFECT, AllowEntry, Stat, allowed, stat, verdict
from rollgate.evaluation.sources import SampleRequest, Source
from rollgate.evaluation.tasks import EvalTask, env_class, generate_tasks, reward_range

log = logging.getLogger("rollgate.audit")

REPORT_KIND = "rollgate.audit.report"
REPORT_SCHEMA_VERSION = 1
SCRIPT_KEY = "rollgate_script"  # the scripted backend's metadata key (rollgate.model_server.scripted)
SNIPPET_CHARS = 600
ANSWER_ONLY = "answer_only"  # the base of the format probes (builtin.AnswerOnly)


@dataclass
class AuditOptions:
    envs: list[str]  # names or glob patterns
    n: int = 8
    seed: int = 0
    probes: list[str] | None = None  # None: every loaded probe
    max_turns: int = 16
    max_output_tokens: int = 2048  # per model call; an episode may use max_turns of them
    resamples: int = 2000
    allowlist: list[AllowEntry] = field(default_factory=list)
    gateway: str | None = None  # where the episodes ran, for the report (None: the embedded stack)


def stack_settings(opts: AuditOptions, env: str, *, config: str | None = None, redis_url: str | None = None):
    """Settings of the embedded stack that runs one environment's probes: the scripted backend and
    budgets large enough for a gold path (a long `gold.calls`) to finish."""
    from rollgate.core.settings import Settings

    agent = {
        "max_turns": opts.max_turns,
        "max_output_tokens_per_call": opts.max_output_tokens,
        "max_output_tokens": opts.max_output_tokens * opts.max_turns,
    }
    # No model directory: the scripted backend then has no tokenizer and no context limit, so a long
    # prompt (reasoning_gym/arc_agi) or the long-output probe is never refused for the tiny model's 2048.
    model = {"backend": "scripted", "model_path": ""}
    settings = Settings.load(config, redis_url=redis_url, model=model, agent=agent)
    settings.envs = [env]
    return settings


def _err(kind: str, message: str) -> dict[str, Any]:
    return {"verdict": "error", "error": {"type": kind, "message": message}}


def resolve(
    patterns: Sequence[str], served: Sequence[str] | None = None
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Environment names, and an error entry per pattern that names none: of the local registry,
    or of `served` (a gateway's environments) where given."""
    import fnmatch

    from rollgate.resources_servers.registry import resolve_envs

    names: dict[str, None] = {}
    errors: dict[str, dict[str, Any]] = {}
    for p in patterns:
        try:
            if served is None:
                names.update(dict.fromkeys(resolve_envs([p])))
                continue
            found = [e for e in served if fnmatch.fnmatchcase(e, p)]
            if not found:
                raise BadRequest(f"the gateway serves no environment {p!r}", component="audit", field="--env")
            names.update(dict.fromkeys(found))
        except RollgateError as exc:
            errors[p] = {"error": {"type": "unknown_env", "message": exc.message}, "probes": {}}
    return list(names), errors


CANARY = "rollgate audit canary: the scripted backend plays this turn"


def check_scripted(source: Source, env: str, opts: AuditOptions) -> None:
    """One episode whose script is a single known reply: where the reply that comes back is another
    (a gateway serving a real model ignores the script), every verdict would be about that model,
    not about the verifier, so the audit refuses to run."""
    task = _tasks(env, AuditOptions(envs=[env], n=1, seed=opts.seed))[0]
    row = json.loads(json.dumps(task.row))
    rcp = row.setdefault("responses_create_params", {})
    rcp["metadata"] = {**(rcp.get("metadata") or {}), SCRIPT_KEY: json.dumps([{"text": CANARY}])}
    row["task_id"] = f"{task.task_id}~canary"
    got: list[Trajectory] = []
    source.run(
        [SampleRequest(EvalTask(env, row["task_id"], row, "canary"), 0)],
        lambda _r, t: got.append(t),
        sampling={},
        policy_version="audit",
    )
    texts = [
        str(part.get("text", ""))
        for m in (got[0].messages if got else [])
        if m.get("role") == "assistant" and isinstance(m.get("content"), list)
        for part in m["content"]
        if isinstance(part, dict)
    ]
    if CANARY not in texts:
        seen = texts[0][:120] if texts else (got[0].outcome.value if got else "no episode")
        raise BadRequest(
            f"its model did not play the probes' scripts (sent {CANARY!r}, got {seen!r}): the audit needs a "
            "gateway whose model server runs the scripted backend (model.backend: scripted)",
            component="audit",
            field="--gateway",
        )


def _tools(env: str) -> list[dict[str, Any]]:
    try:
        return list(env_class(env).tool_schemas())
    except Exception:  # noqa: BLE001 - a probe without tools still runs; the environment's own error comes later
        return []


def _roles(env: str) -> tuple[str, ...]:
    try:
        return tuple(env_class(env).roles)
    except Exception:  # noqa: BLE001 - an environment this process cannot load is audited as single-role
        return ()


def reference_answers(env: str, tasks: list[EvalTask]) -> dict[str, str]:
    """Gold answers an environment computes but its rows do not carry (rows of reasoning-gym hold
    a recipe, not the answer): from its `reference_answer(state)`, seeded here as a session would
    be. Empty when the environment has none or seeding fails here (the probes that need gold skip)."""
    import random

    from rollgate.core.schemas import TaskRow
    from rollgate.resources_servers.registry import load_env

    out: dict[str, str] = {}
    try:
        if not callable(getattr(env_class(env), "reference_answer", None)):
            return out  # nothing to build (building may start a sandbox or a server)
        instance = load_env(env)
        if not callable(getattr(instance, "reference_answer", None)) or "seed" in instance._async_hooks:
            return out
        for t in tasks:
            task = TaskRow.model_validate(t.row)
            seeded = instance.seed(task, random.Random(task.seed if task.seed is not None else 0))
            answer = instance.reference_answer(seeded[0] if isinstance(seeded, tuple) else seeded)
            if answer is not None:
                out[t.task_id] = str(answer)
    except Exception as exc:  # noqa: BLE001 - without gold the gold probes skip; the episodes still run
        log.info("audit: no reference answers for %s: %s", env, exc)
    return out


def _trim(value: Any) -> Any:
    if isinstance(value, str):
        return value if len(value) <= SNIPPET_CHARS else value[:SNIPPET_CHARS] + f"... [{len(value)} chars]"
    if isinstance(value, list):
        return [_trim(v) for v in value]
    if isinstance(value, dict):
        return {k: _trim(v) for k, v in value.items()}
    return value


def transcript(traj: Trajectory) -> dict[str, Any]:
    return {
        "task_id": traj.task.task_id,
        "reward": traj.reward,
        "outcome": traj.outcome.value,
        "metrics": _trim(traj.metrics),
        "messages": _trim(traj.messages),
    }


def _plan(env: str, tasks: list[EvalTask], probes: ProbeSet, names: list[str], opts: AuditOptions):
    """(requests, per-probe entries decided before running: skipped or errored)."""
    roles = _roles(env)
    if roles:  # one scripted policy cannot play several roles (docs/roles.md)
        why = f"multi-role environment ({', '.join(roles)}): the probes play one policy, not one per role"
        return [], {
            n: {"kind": getattr(probes.probes.get(n), "kind", "?"), "verdict": "skipped", "why": why} for n in names
        }
    tools = _tools(env)
    golds = reference_answers(env, tasks)
    requests: list[SampleRequest] = []
    decided: dict[str, dict[str, Any]] = {}
    for name in names:
        probe = probes.probes.get(name)
        if probe is None:
            why = probes.broken.get(name)
            decided[name] = _err("probe_load_error", why) if why else _err("unknown_probe", f"no probe named {name!r}")
            continue
        mine: list[SampleRequest] = []
        skipped: list[str] = []
        try:
            for t in tasks:
                ctx = ProbeContext.of(env, t.row, tools, opts.max_turns, gold=golds.get(t.task_id))
                why = probe.applies(ctx)
                if why:
                    skipped.append(why)
                    continue
                script = check_script(probe.script(ctx))
                row = json.loads(json.dumps(t.row))
                rcp = row.setdefault("responses_create_params", {})
                rcp["metadata"] = {**(rcp.get("metadata") or {}), SCRIPT_KEY: json.dumps(script)}
                task_id = f"{t.task_id}~{name}"
                row["task_id"] = task_id
                mine.append(SampleRequest(EvalTask(env=env, task_id=task_id, row=row, content=name), 0))
        except Exception as exc:  # noqa: BLE001 - a plugin's bug is its probe's error
            decided[name] = {"kind": probe.kind, **_err("probe_error", f"{type(exc).__name__}: {exc}")}
            continue
        if not mine:
            decided[name] = {"kind": probe.kind, "verdict": "skipped", "why": skipped[0] if skipped else "no task"}
            continue
        requests.extend(mine)
        decided[name] = {"kind": probe.kind, "_pending": len(mine), "skipped_tasks": len(skipped)}
    return requests, decided


def _conclude(env: str, entries: dict[str, dict[str, Any]], results: dict[str, list[Trajectory]], opts: AuditOptions):
    lowest, highest = reward_range(env)
    stats: dict[str, Stat | None] = {}
    for name, entry in entries.items():
        if "_pending" not in entry:
            continue
        trajs = results.get(name, [])
        failed = [t for t in trajs if not t.outcome.has_reward]
        entry.pop("_pending")
        if failed or not trajs:
            first = failed[0].error if failed else None
            kind = first.kind.value if first else "no_result"
            message = first.message if first else "no episode finished"
            entry.update(_err(f"env_{kind}", f"{len(failed)} of {len(trajs)} episodes failed: {message}"))
            continue
        s = stat([float(t.reward or 0.0) for t in trajs], resamples=opts.resamples, seed=opts.seed)
        stats[name] = s
        entry.update(s.as_dict() if s else {})
        entry["_trajs"] = trajs
    floor = next((stats[n] for n, e in entries.items() if e.get("kind") == "floor" and stats.get(n)), None)
    ref = next((stats[n] for n, e in entries.items() if e.get("kind") == "reference" and stats.get(n)), None)
    floor_mean = floor.mean if floor else lowest
    answer = stats.get(ANSWER_ONLY)
    for name, entry in entries.items():
        trajs = entry.pop("_trajs", None)
        if trajs is None:
            continue
        if entry["kind"] == "format" and (answer is None or answer.mean <= floor_mean + EPS):
            entry["verdict"] = "skipped"
            entry["why"] = "the gold answer alone earns no more than the floor: the task is scored on its actions"
            continue
        if name == ANSWER_ONLY:
            entry["verdict"] = "clean"
            continue
        base = answer if entry["kind"] == "format" else ref
        effect = MIN_EFFECT * (highest - lowest)
        v, why = verdict(entry["kind"], stats[name], floor=floor_mean, lowest=lowest, reference=base, min_effect=effect)
        entry["verdict"] = v
        if why:
            entry["why"] = why
        truncated = sum(t.outcome.value == "truncated" for t in trajs)
        if truncated:
            entry["truncated"] = truncated  # ran out of turns: raise --max-turns for long gold paths
        if v == "reference" and stats[name].mean < highest - EPS:
            entry["example"] = transcript(min(trajs, key=lambda t: t.reward or 0.0))  # why the gold fell short
        if v in FLAGGED or v == "strict_format":
            best = (
                max(trajs, key=lambda t: t.reward or 0.0) if v in FLAGGED else min(trajs, key=lambda t: t.reward or 0.0)
            )
            entry["example"] = transcript(best)
        reason = allowed(opts.allowlist, env, name) if v in FLAGGED else None
        if reason:
            entry["allowlisted"] = reason
    return {
        "reward_range": [lowest, highest],
        "floor": floor.mean if floor else None,
        "reference": ref.mean if ref else None,
    }


def _tasks(env: str, opts: AuditOptions) -> list[EvalTask]:
    """N tasks from the held-out split; a game with few starting positions may have none there
    (textarena's fixed puzzles), so the train split, then as many as it has, are tried next."""
    try:
        return generate_tasks([env], opts.n, opts.seed, "eval")
    except RollgateError as first:
        for split in ("train", "eval"):
            for n in (opts.n, 1):
                try:
                    return generate_tasks([env], n, opts.seed, split)
                except RollgateError:
                    continue
        raise first


def audit_env(env: str, source: Source, probes: ProbeSet, names: list[str], opts: AuditOptions) -> dict[str, Any]:
    started = time.monotonic()
    try:
        tasks = _tasks(env, opts)
    except Exception as exc:  # noqa: BLE001 - reported, the audit goes on
        msg = exc.message if isinstance(exc, RollgateError) else f"{type(exc).__name__}: {exc}"
        return {
            "error": {"type": "tasks_error", "message": msg},
            "probes": {n: _err("tasks_error", msg) for n in names},
        }
    requests, entries = _plan(env, tasks, probes, names, opts)
    results: dict[str, list[Trajectory]] = {}

    def on_result(req: SampleRequest, traj: Trajectory) -> None:
        results.setdefault(req.task.content, []).append(traj)

    try:
        source.run(requests, on_result, sampling={}, policy_version="audit")
    except Exception as exc:  # noqa: BLE001 - the environment failed as a whole: each probe says so
        msg = exc.message if isinstance(exc, RollgateError) else f"{type(exc).__name__}: {exc}"
        for entry in entries.values():
            if entry.pop("_pending", None) is not None:
                entry.update(_err("env_error", msg))
        return {"error": {"type": "env_error", "message": msg}, "probes": entries}
    summary = _conclude(env, entries, results, opts)
    return {**summary, "tasks": len(tasks), "seconds": round(time.monotonic() - started, 2), "probes": entries}


def counts(envs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    c = {"exploitable": 0, "suspicious": 0, "clean": 0, "strict_format": 0, "error": 0, "skipped": 0}
    flagged, new = [], []
    for env, block in envs.items():
        if not block.get("probes") and block.get("error"):
            c["error"] += 1
        for name, entry in block.get("probes", {}).items():
            v = entry.get("verdict")
            if v in c:
                c[v] += 1
            if v in FLAGGED:
                flagged.append(f"{env}:{name}")
                if v == "exploitable" and not entry.get("allowlisted"):
                    new.append(f"{env}:{name}")
    return {"counts": c, "flagged": flagged, "exploitable_not_allowlisted": new}


def run_audit(
    opts: AuditOptions,
    make_source: Callable[[str], Source],
    *,
    probes: ProbeSet | None = None,
    on_env: Callable[[str, dict[str, Any]], None] | None = None,
    served: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The report over `opts.envs`; `served`: the environments of a gateway that `make_source`
    reaches (its names resolve the patterns), None for the local registry."""
    started = time.monotonic()
    probes = probes or load_probes()
    names = list(opts.probes) if opts.probes else [*probes.probes, *probes.broken]
    envs, report_envs = resolve(opts.envs, served)
    for env in envs:
        report_envs[env] = block = audit_env(env, make_source(env), probes, names, opts)
        if on_env:
            on_env(env, block)
    return {
        "kind": REPORT_KIND,
        "schema_version": REPORT_SCHEMA_VERSION,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "options": {
            "envs": opts.envs,
            "n": opts.n,
            "seed": opts.seed,
            "probes": names,
            "max_turns": opts.max_turns,
            "max_output_tokens": opts.max_output_tokens,
            "gateway": opts.gateway,
        },
        "probes": {n: {"kind": p.kind, "description": p.description} for n, p in probes.probes.items()},
        "seconds": round(time.monotonic() - started, 2),
        **counts(report_envs),
        "envs": report_envs,
    }
