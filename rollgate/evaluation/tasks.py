"""The tasks of an evaluation: read from a file or generated per environment, each with its
environment, id, content hash and tags; and the guard against evaluating on training tasks."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollgate.core.errors import BadRequest, NotFound, RollgateError
from rollgate.core.rows import parse_row
from rollgate.evaluation.samples import COMPONENT, content_hash, read_jsonl_rows, task_tags

log = logging.getLogger("rollgate.eval")

DEFAULT_REWARD_RANGE = (0.0, 1.0)


@dataclass(frozen=True)
class EvalTask:
    env: str
    task_id: str
    row: dict[str, Any]  # as submitted: `env` and `task_id` always set
    content: str  # content hash (samples.content_hash)
    tags: dict[str, str] = field(default_factory=dict)


def _task(env: str, task_id: str, row: dict[str, Any]) -> EvalTask:
    row = {**row, "env": env, "task_id": task_id}
    return EvalTask(env=env, task_id=task_id, row=row, content=content_hash(row), tags=task_tags(row))


def env_spec(name: str):
    """The registry's entry for an environment (rollgate.resources_servers.registry)."""
    from rollgate.resources_servers.registry import default_registry

    try:
        return default_registry().get(name)
    except NotFound as exc:
        raise BadRequest(exc.message, component=COMPONENT, field="--env") from None


def env_class(name: str) -> type:
    """The Environment class of a registered environment, without building it (an instance
    may need a sandbox or a dataset)."""
    return env_spec(name).env_class


def check_envs(envs: Sequence[str], known: Collection[str]) -> None:
    unknown = [e for e in envs if e not in known]
    if unknown:
        raise BadRequest(
            f"unknown environment {unknown[0]!r}; known: {', '.join(sorted(known)) or 'none'}",
            component=COMPONENT,
            field="--env",
        )
    if len(set(envs)) != len(envs):
        raise BadRequest("an environment is given twice", component=COMPONENT, field="--env")


def reward_range(name: str) -> tuple[float, float]:
    """An environment's declared reward range (`reward_range` on its class), else [0, 1]."""
    try:
        cls = env_class(name)
    except (RollgateError, ImportError, AttributeError):
        return DEFAULT_REWARD_RANGE  # served elsewhere (a gateway's plugin): assume the usual range
    lo, hi = getattr(cls, "reward_range", DEFAULT_REWARD_RANGE)
    return float(lo), float(hi)


def check_threshold(threshold: float, envs: Sequence[str]) -> None:
    """The gateway's check of a job's threshold (jobs/plan.py), against the installed classes'
    reward ranges, with the error naming the flag."""
    from rollgate.jobs import plan  # not at import: it loads the job queue's models (~0.5 s)

    try:
        plan.check_threshold(threshold, envs, reward_range)
    except BadRequest as exc:
        raise BadRequest(exc.message, component=COMPONENT, field="--threshold") from None


def load_task_file(path: Path, envs: Sequence[str]) -> tuple[list[EvalTask], int]:
    """Rows of the file for the chosen environments, and how many rows named another one.
    A row that names no environment belongs to the one --env, if exactly one was given."""
    default = envs[0] if len(envs) == 1 else None
    tasks: list[EvalTask] = []
    seen: dict[tuple[str, str], int] = {}
    skipped = 0
    for n, raw in read_jsonl_rows(path, "--tasks"):
        if raw.get("env") is None and default is None:
            raise BadRequest(
                f"--tasks {path}:{n}: the row names no environment and several --env were given",
                component=COMPONENT,
                field="env",
            )
        try:
            task = parse_row(raw, env=default, where=f"{path.name}:{n}", component=COMPONENT)
        except BadRequest as exc:
            raise BadRequest(f"--tasks {exc.message}", component=COMPONENT, field=exc.field) from None
        if task.env not in envs:
            skipped += 1
            continue
        key = (task.env, task.task_id)
        if key in seen:
            raise BadRequest(
                f"--tasks {path}: task_id {task.task_id!r} of {task.env} appears on lines {seen[key]} and {n}",
                component=COMPONENT,
                field="task_id",
            )
        seen[key] = n
        tasks.append(_task(task.env, task.task_id, task.dump()))
    return tasks, skipped


def generate_tasks(envs: Sequence[str], n: int, seed: int, split: str | None) -> list[EvalTask]:
    """N tasks per environment from the registry's generators (`rollgate tasks`), from the
    held-out `eval` split unless another is named: splits never overlap."""
    if n < 1:
        raise BadRequest(f"--n must be >= 1, got {n}", component=COMPONENT, field="--n")
    tasks = []
    for env in envs:
        generator = env_spec(env).tasks
        if generator is None:
            raise BadRequest(
                f"environment {env!r} cannot generate tasks; use --tasks FILE", component=COMPONENT, field="--n"
            )
        try:
            rows = generator(n, seed, None, split or "eval")
        except BadRequest as exc:
            raise BadRequest(f"{env}: {exc.message}", component=COMPONENT, field=f"--{exc.field or 'n'}") from None
        for raw in rows:
            task = parse_row(raw, env=env, component=COMPONENT)
            tasks.append(_task(env, task.task_id, task.dump()))
    return tasks


def train_overlap(tasks: Sequence[EvalTask], train_file: Path) -> list[EvalTask]:
    """The eval tasks whose content hash appears in the training file."""
    from rollgate.core.schemas import TaskRow

    envs = sorted({t.env for t in tasks})
    train = set()
    for _, raw in read_jsonl_rows(train_file, "--train-tasks"):
        try:  # normalised as eval rows are (no null fields), so equal content hashes equal
            row = TaskRow.model_validate(raw).row()
        except ValueError:
            row = raw
        # A training row that names no environment may be a task of any evaluated one.
        for env in [row["env"]] if row.get("env") else envs:
            train.add(content_hash(row, env))
    return [t for t in tasks if t.content in train]
