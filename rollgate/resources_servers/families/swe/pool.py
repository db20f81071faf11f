"""Validated tasks of one project version: mutations whose target tests fail with the bug and pass
without it, while every other test still passes.

Candidates are every mutation of the project's source files, in one fixed order (per kind a
seeded shuffle, then the kinds interleaved, so the first tasks mix the kinds). Validation scans
them in that order: one run of the whole suite per candidate, in a sandbox holding the pristine
tree with the one mutated file swapped in. A candidate is kept when 1..MAX_TARGETS tests fail,
each of them passed on the pristine tree and no test went missing (a collection error rejects
it); its failing tests are its targets, once each has failed again in CONFIRM_RUNS runs of the
targets alone (a test that passes once on the buggy tree, by the clock or by chance, would pay a
policy that changes nothing: it is dropped, and a candidate left with none is rejected). The
pristine suite runs BASELINE_RUNS times: only a test that passes in every run is in the baseline,
so a flaky test is neither a target nor a regression. Results are cached per project version under
<home>/swe/pools, extended on demand and written after each batch, so "the first k validated
tasks" is the same list on every machine and is computed once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from rollgate.core.blocking import FileLock
from rollgate.core.errors import BadRequest
from rollgate.resources_servers.families.swe.checkout import Files, pristine, source_files, visible
from rollgate.resources_servers.families.swe.mutations import KINDS, Mutation, apply, enumerate_mutations
from rollgate.resources_servers.families.swe.projects import Project
from rollgate.resources_servers.families.swe.sources import SourceError, ensure_runner, ensure_source, swe_home
from rollgate.resources_servers.families.swe.testrun import SuiteRun, run_pytest
from rollgate.sandbox import SandboxProvider

log = logging.getLogger("rollgate.envs.swe")

POOL_VERSION = 2  # bumped when the engine or the acceptance rule changes: older caches are rebuilt
MAX_TARGETS = 8
BASELINE_RUNS = 3  # runs of the pristine suite; the baseline is what passes in all of them
CONFIRM_RUNS = 3  # further runs of a candidate's targets alone, each of which they must fail
MAX_SCAN = 400  # candidates validated at most per project version, however few were kept
LOCK_WAIT_S = 3600.0  # how long a caller waits while another builds the same pool


class Task(BaseModel):
    mutation: Mutation
    targets: list[str]
    messages: dict[str, str]


def candidates(project: Project, files: Files) -> list[Mutation]:
    by_kind: dict[str, list[Mutation]] = {k: [] for k in KINDS}
    for path in sorted(source_files(project, files)):
        for m in enumerate_mutations(path, files[path].decode("utf-8")):
            by_kind[m.kind].append(m)
    for kind, ms in by_kind.items():
        random.Random(f"{project.name}-{project.version}-{kind}").shuffle(ms)
    out: list[Mutation] = []
    longest = max((len(v) for v in by_kind.values()), default=0)
    for i in range(longest):
        out.extend(by_kind[k][i] for k in KINDS if i < len(by_kind[k]))
    return out


def judge(baseline: set[str], run: SuiteRun) -> list[str] | None:
    """The target tests of a candidate run, or None when the candidate is rejected."""
    failed = run.failed & baseline  # a test that never passed says nothing about the mutation
    if not failed or len(failed) > MAX_TARGETS or run.exit_code != 1:
        return None
    if not baseline <= set(run.outcomes):
        return None  # tests gone missing (a collection error)
    return sorted(failed)


def steady(runs: list[SuiteRun]) -> set[str]:
    """The tests that passed in every one of several runs of the same tree."""
    return set.intersection(*(r.passed for r in runs)) if runs else set()


def confirmed(targets: list[str], reruns: list[SuiteRun]) -> list[str]:
    """The targets that failed in every rerun (a target that passed once, or did not run, is flaky)."""
    return [t for t in targets if all(r.outcomes.get(t) in ("FAILED", "ERROR") for r in reruns)]


def pool_path(project: Project, home: str) -> Path:
    return swe_home(home) / "pools" / f"{project.name}-{project.version}-v{POOL_VERSION}.json"


def baseline(project: Project, home: str) -> set[str] | None:
    """The tests that pass on the pristine tree, as validation recorded them (None where this
    machine has not validated the project)."""
    try:
        value = json.loads(pool_path(project, home).read_text()).get("baseline")
    except (OSError, ValueError, AttributeError):
        return None
    return {str(t) for t in value} if isinstance(value, list) else None


def _write_json(path: Path, value: Any) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".pool.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(value, f, indent=1)
    os.replace(tmp, path)


class PoolBuilder:
    """Builds (or reads) a project's validated tasks with a sandbox provider."""

    def __init__(self, provider: SandboxProvider, home: str, *, workers: int = 2, timeout_s: float = 120.0):
        self.provider = provider
        self.home = home
        self.workers = max(1, workers)
        self.timeout_s = timeout_s

    def path(self, project: Project) -> Path:
        return pool_path(project, self.home)

    async def tasks(self, project: Project, count: int, *, progress: Callable[[str], None] | None = None) -> list[Task]:
        """The first `count` validated tasks (fewer only when the candidates run out)."""
        path = self.path(project)
        what = f"the task pool of {project.requirement}"
        async with FileLock(path.with_suffix(".lock"), what=what, timeout_s=LOCK_WAIT_S, component="env:swe"):
            return await self._tasks(project, count, path, progress or log.info)

    async def _tasks(self, project: Project, count: int, path: Path, progress: Callable[[str], None]) -> list[Task]:
        state: dict[str, Any] = {}
        if path.is_file():
            state = json.loads(path.read_text())
        kept = [Task.model_validate(t) for t in state.get("kept", [])]
        scanned = int(state.get("scanned", 0))
        root = ensure_source(project, self.home)
        files = pristine(root)
        cands = candidates(project, files)[:MAX_SCAN]
        if len(kept) >= count or scanned >= len(cands):
            return kept[:count]
        runner = str(ensure_runner(self.home))
        started = time.monotonic()
        boxes = [await self.provider.create() for _ in range(self.workers)]
        try:
            await asyncio.gather(*(self._write(b, files) for b in boxes))
            baseline = state.get("baseline")
            if baseline is None:
                runs = [await self._run(boxes[0], project, runner) for _ in range(BASELINE_RUNS)]
                passing = steady(runs)
                if not passing:
                    raise SourceError("baseline", f"{project.requirement}: no test passes on the pristine tree")
                baseline = sorted(passing)
                state["flaky"] = sorted(set.union(*(r.passed for r in runs)) - passing)
                state["baseline_s"] = max(r.result.duration_s if r.result else 0.0 for r in runs)
            base = set(baseline)
            # a mutation that loops forever is rejected after a few times the pristine suite's time
            limit = min(self.timeout_s, 5 * float(state.get("baseline_s", 10.0)) + 10)
            while len(kept) < count and scanned < len(cands):
                batch = cands[scanned : scanned + self.workers * 4]
                queue: asyncio.Queue[tuple[int, Mutation]] = asyncio.Queue()
                for i, m in enumerate(batch):
                    queue.put_nowait((i, m))
                results: list[Task | None] = [None] * len(batch)

                async def work(box, results=results, queue=queue):
                    while not queue.empty():
                        i, m = queue.get_nowait()
                        results[i] = await self._try(box, project, runner, files, base, m, limit)

                await asyncio.gather(*(work(b) for b in boxes))
                kept.extend(t for t in results if t is not None)
                scanned += len(batch)
                _write_json(
                    path,
                    {
                        "project": project.requirement,
                        "baseline": baseline,
                        "baseline_s": state.get("baseline_s"),
                        "flaky": state.get("flaky", []),
                        "scanned": scanned,
                        "kept": [t.model_dump() for t in kept],
                    },
                )
                progress(
                    f"{project.name}: {len(kept)} validated of {scanned} candidates ({time.monotonic() - started:.0f}s)"
                )
        finally:
            await asyncio.gather(*(b.destroy() for b in boxes))
        return kept[:count]

    async def _write(self, box, files: Files) -> None:
        for path, data in files.items():
            await box.write_file(path, data)

    async def _run(
        self, box, project: Project, runner: str, timeout_s: float | None = None, selectors: list[str] | None = None
    ) -> SuiteRun:
        python = getattr(self.provider, "python", "python3")
        return await run_pytest(
            box,
            python=python,
            runner=runner,
            python_path=project.python_path,
            selectors=selectors or (),
            timeout_s=timeout_s or self.timeout_s,
        )

    async def _try(
        self, box, project: Project, runner: str, files: Files, base: set[str], m: Mutation, limit: float
    ) -> Task | None:
        original = files[m.path]
        await box.write_file(m.path, apply(original.decode("utf-8"), m))
        try:
            run = await self._run(box, project, runner, limit)
            targets = judge(base, run)
            if targets is None:
                return None
            reruns = [await self._run(box, project, runner, limit, targets) for _ in range(CONFIRM_RUNS)]
        except Exception as exc:  # a hang or a crash caused by the mutation: not a usable task
            log.debug("candidate %s rejected: %s", m.id, exc)
            return None
        finally:
            await box.write_file(m.path, original)
        targets = confirmed(targets, reruns)
        if not targets:
            return None
        try:
            visible(project, files, targets)  # a target the model's copy could not hide is no task
        except BadRequest:
            return None
        return Task(mutation=m, targets=targets, messages={t: run.messages.get(t, "") for t in targets})
