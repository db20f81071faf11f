"""The work behind `rollgate collect`: read a task file, skip what --out already holds, submit
the rest to a gateway, and write every record as it arrives.

- A bad row (not JSON, not a task row, no or an unknown environment) fails alone: it goes to
  the failures file with its line number and field; the other rows are collected.
- Resume: a task id that already has its `repeats` trajectories in --out is skipped; a partial
  last line (a crash mid-write) is cut off before appending.
- Trajectories (every outcome: trainers skip the error ones) go to --out; FailureRecords go to
  `<out>.failures.jsonl`, rewritten on each run.
- A job with roles (docs/roles.md) yields one trajectory per role per episode: each is a line of
  --out, and resume counts episodes (distinct `episode_id`s), not lines.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rollgate.client.gateway import RolloutClient
from rollgate.core import jsonutil
from rollgate.core.errors import BadRequest
from rollgate.core.rows import parse_row
from rollgate.core.schemas import ErrorInfo, ErrorKind, FailureRecord

log = logging.getLogger("rollgate.collect")

MAX_JOB_BYTES = 4 * 1024 * 1024  # rows per submitted job, so one request stays under the body limit


@dataclass
class PlannedRow:
    line: int
    task_id: str
    env: str
    row: dict[str, Any]


@dataclass
class CollectStats:
    trajectories: int = 0
    failures: int = 0
    skipped: int = 0  # tasks already complete in --out
    outcomes: Counter = field(default_factory=Counter)
    reward_sum: float = 0.0
    rewarded: int = 0
    job_ids: list[str] = field(default_factory=list)

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.rewarded if self.rewarded else None

    def add(self, record: dict[str, Any]) -> None:
        self.trajectories += 1
        self.outcomes[record.get("outcome", "?")] += 1
        if record.get("reward") is not None:
            self.reward_sum += float(record["reward"])
            self.rewarded += 1


def failures_path(out: Path) -> Path:
    return out.with_name(out.name + ".failures.jsonl")


def _failure(line: int, message: str, field: str, task_id: str | None = None) -> dict[str, Any]:
    return FailureRecord(
        task_id=task_id,
        line=line,
        error=ErrorInfo(
            kind=ErrorKind.bad_request,
            component="collect",
            message=message,
            field=field,
        ),
    ).model_dump(mode="json", exclude_none=True)


def read_tasks(path: Path, *, default_env: str | None, known_envs: list[str]) -> tuple[list[PlannedRow], list[dict]]:
    """-> (good rows, FailureRecords of the bad ones). Line numbers are 1-based."""
    rows: list[PlannedRow] = []
    bad: list[dict[str, Any]] = []
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                data = jsonutil.loads(raw)
            except jsonutil.JSONDecodeError as exc:
                bad.append(_failure(lineno, f"line {lineno}: not valid JSON: {exc}", "line"))
                continue
            if not isinstance(data, dict):
                bad.append(_failure(lineno, f"line {lineno}: a task row must be a JSON object", "line"))
                continue
            try:
                task = parse_row(data, env=default_env, known_envs=known_envs, component="collect")
            except BadRequest as exc:
                task_id = data.get("task_id") if isinstance(data.get("task_id"), str) else None
                bad.append(_failure(lineno, f"line {lineno}: {exc.message}", exc.field or "row", task_id))
                continue
            rows.append(PlannedRow(line=lineno, task_id=task.task_id, env=task.env, row=data))
    return rows, bad


def finished_counts(out: Path) -> Counter:
    """Trajectories per task id already in `out`; cuts off a torn last line so appends stay valid."""
    counts: Counter = Counter()
    episodes: set[tuple[str, str]] = set()  # a multi-role episode is one sample, whatever its roles
    if not out.exists():
        return counts
    data = out.read_bytes()
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
        log.warning("%s ends in a partial line (an interrupted write); removing it", out)
        with out.open("r+b") as f:
            f.truncate(keep)
        data = data[:keep]
    for raw in data.splitlines():
        try:
            rec = jsonutil.loads(raw)
            task_id, episode = str(rec["task"]["task_id"]), rec.get("episode_id")
            if episode is not None:
                if (task_id, episode) in episodes:
                    continue
                episodes.add((task_id, episode))
            counts[task_id] += 1
        except (jsonutil.JSONDecodeError, KeyError, TypeError):
            continue
    return counts


def _batches(rows: list[PlannedRow]) -> list[list[PlannedRow]]:
    out, cur, size = [], [], 0
    for r in rows:
        n = len(jsonutil.dumps(r.row))
        if cur and size + n > MAX_JOB_BYTES:
            out.append(cur)
            cur, size = [], 0
        cur.append(r)
        size += n
    if cur:
        out.append(cur)
    return out


def collect(
    client: RolloutClient,
    tasks: Path,
    out: Path,
    *,
    env: str | None = None,
    repeats: int = 1,
    sampling: dict[str, Any] | None = None,
    policy_version: str | None = None,
    agent: str | None = None,
    roles: dict[str, Any] | None = None,
    on_total: Callable[[int], None] = lambda n: None,
    on_record: Callable[[dict[str, Any], CollectStats], None] = lambda r, s: None,
) -> CollectStats:
    stats = CollectStats()
    rows, bad = read_tasks(tasks, default_env=env, known_envs=client.envs())
    done = finished_counts(out)
    todo: dict[tuple[int, str], list[PlannedRow]] = {}  # (samples still missing, env) -> rows
    for r in rows:
        missing = repeats - done.get(r.task_id, 0)
        if missing <= 0:
            stats.skipped += 1
        else:
            todo.setdefault((missing, r.env), []).append(r)
    jobs: list[tuple[str, list[PlannedRow]]] = []
    on_total(sum(m * len(rs) for (m, _), rs in todo.items()) + len(bad))
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("ab") as out_f, failures_path(out).open("wb") as fail_f:
        for rec in bad:
            _write(fail_f, rec)
            stats.failures += 1
            on_record(rec, stats)
        try:
            for (missing, env_name), group in sorted(todo.items()):
                for batch in _batches(group):
                    # Rows travel unchanged (NeMo Gym rows stay NeMo Gym rows); the environment
                    # goes on the job, and the agent derives the same stable task id as above.
                    job = client.submit(
                        [r.row for r in batch],
                        env=env_name,
                        repeats=missing,
                        sampling=sampling,
                        policy_version=policy_version,
                        agent=agent,
                        roles=roles,
                    )
                    jobs.append((job["job_id"], batch))
                    stats.job_ids.append(job["job_id"])
            for job_id, batch in jobs:
                _drain(client, job_id, batch, out_f, fail_f, stats, on_record)
        except KeyboardInterrupt:
            for job_id, _ in jobs:
                with contextlib.suppress(Exception):  # best effort on the way out
                    client.cancel(job_id)
            raise
    return stats


def _write(f: IO[bytes], record: dict[str, Any]) -> None:
    # One write per whole line, flushed: an interruption loses at most the line being written.
    f.write(jsonutil.dumps(record) + b"\n")
    f.flush()


def _drain(
    client: RolloutClient,
    job_id: str,
    batch: list[PlannedRow],
    out_f: IO[bytes],
    fail_f: IO[bytes],
    stats: CollectStats,
    on_record,
) -> None:
    for line in client.results(job_id, wait=True):
        kind, record = line.get("type"), line.get("record")
        if kind == "trajectory":
            _write(out_f, record)
            stats.add(record)
        elif kind == "episode":  # a multi-role episode: one line per role
            for traj in record["trajectories"]:
                _write(out_f, traj)
                stats.add(traj)
        elif kind == "failure":
            index = record.get("row_index")
            if isinstance(index, int) and 0 <= index < len(batch):
                record["line"] = batch[index].line  # the job's row index -> the file's line number
            _write(fail_f, record)
            stats.failures += 1
        else:
            continue
        on_record(record, stats)
