"""`rollgate tasks swe/<project>`: rows drawn from the project's validated tasks (pool.py).

A row holds what rebuilds the task (project, version, mutation, target tests and their failure
messages) plus the prompt; the reference fix (`gold`, the reverse of the mutation as a patch) is
for oracle checks and never shown to the model. For (n, seed) the rows come from the first
min(POOL_SIZE, 2n + 6) validated tasks, shuffled by the seed and filtered by split (a task's
split is a function of its mutation), so the same (n, seed) always gives the same rows.
"""

from __future__ import annotations

import os
import random
from typing import Any

from rollgate.core.blocking import run_sync
from rollgate.core.errors import BadRequest
from rollgate.core.rows import derive_seed
from rollgate.core.settings import Settings
from rollgate.resources_servers.families.splits import check_n, check_split, take
from rollgate.resources_servers.families.swe.checkout import unified_diff
from rollgate.resources_servers.families.swe.mutations import apply
from rollgate.resources_servers.families.swe.pool import PoolBuilder, Task
from rollgate.resources_servers.families.swe.projects import Project, get_project
from rollgate.resources_servers.families.swe.prompts import SYSTEM_PROMPT, issue_text
from rollgate.resources_servers.families.swe.sources import ensure_runner, ensure_source
from rollgate.sandbox import make_provider

POOL_SIZE = 60  # validated tasks per project version


def builder(home: str, workers: int | None = None) -> PoolBuilder:
    from rollgate.resources_servers.families.swe.env import LIMITS

    runner = ensure_runner(home)
    provider = make_provider("local", limits=LIMITS, ro_paths=[str(runner)])
    return PoolBuilder(provider, home, workers=workers or min(2, os.cpu_count() or 1))


def validated(project: Project, count: int, home: str | None = None) -> list[Task]:
    """The first `count` validated tasks of a project (built and cached on first use)."""
    home = home or Settings().home
    return run_sync(builder(home).tasks(project, count))


def task_row(env: str, project: Project, task: Task, files: dict[str, bytes], task_id: str) -> dict[str, Any]:
    m = task.mutation
    fixed = {m.path: files[m.path]}
    broken = {m.path: apply(files[m.path].decode("utf-8"), m).encode("utf-8")}
    issue = issue_text(env, task.targets, task.messages)
    return {
        "responses_create_params": {
            "input": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": issue}]
        },
        "env": env,
        "task_id": task_id,
        "project": project.name,
        "version": project.version,
        "mutation": m.model_dump(),
        "target_tests": task.targets,
        "failures": task.messages,
        "gold": {
            "calls": [{"name": "apply_patch", "arguments": {"patch": unified_diff(broken, fixed)}}],
            "response": "I fixed the bug.",
        },
    }


def generate_tasks(name: str, n: int, seed: int, config: dict[str, Any] | None, split: str) -> list[dict[str, Any]]:
    env = f"swe/{name}"
    check_n(n)
    want = check_split(split)
    if config:
        raise BadRequest(f"{env} takes no config (got keys {sorted(config)})", component="tasks", field="config")
    project = get_project(name)
    home = Settings().home
    pool = validated(project, min(POOL_SIZE, 2 * n + 6), home)
    from rollgate.resources_servers.families.swe.checkout import pristine

    files = pristine(ensure_source(project, home))
    order = list(range(len(pool)))
    random.Random(derive_seed("swe", name, seed)).shuffle(order)
    candidates = (
        (
            f"{env}|{project.version}|{pool[i].mutation.id}",
            task_row(env, project, pool[i], files, f"{env}-{want}-{seed}-{k}"),
        )
        for k, i in enumerate(order)
    )
    return take(candidates, n, want, what=env, scanned=f"{len(pool)} validated tasks")
