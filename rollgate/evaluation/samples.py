"""What an evaluation directory holds, and reading and appending it crash-safely.

DIR/samples.jsonl      one line per sample (task id, sample index, reward, outcome, final answer)
DIR/trajectories.jsonl the full trajectory of every sample (what `eval reverify` re-scores)
DIR/tasks.jsonl        the task rows evaluated, exactly as submitted
DIR/run.json           what the run was asked to do (resume checks it)
DIR/report.json, DIR/report.html   written at the end

Lines are appended and flushed one at a time: a crash loses at most the line being written,
and a torn last line is cut off before the next append. A sample re-run after a failure is
appended again; readers keep the last line per (env, task_id, sample_index).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, Field, ValidationError

from rollgate.core import jsonutil
from rollgate.core.errors import BadRequest, field_error
from rollgate.core.schemas import SCHEMA_VERSION, ErrorInfo, Outcome, Trajectory

SAMPLES_SCHEMA_VERSION = 1
COMPONENT = "eval"
# Row fields that name or file a task but are not its content (two files may number or file the
# same task differently): left out of the content hash that --train-tasks compares.
NON_CONTENT_FIELDS = ("task_id", "env", "split", "tags", "gold")
# Top-level row fields read as tags, besides a `tags` object or list.
TAG_FIELDS = ("dataset", "difficulty", "category", "split")

SampleKey = tuple[str, str, int]  # env, task_id, sample_index


def content_hash(row: dict[str, Any], env: str | None = None) -> str:
    """sha256 of the row's content: what the model is shown and what grades it. The content key
    is the one the train/eval splits are drawn from (families/splits.row_key: no id, split,
    reference solution, nor a seed that only does bookkeeping); the request's `metadata` is
    plumbing (e.g. a scripted backend's script) and is left out too."""
    body = dict(row)
    params = body.get("responses_create_params")
    if isinstance(params, dict) and "metadata" in params:
        body["responses_create_params"] = {k: v for k, v in params.items() if k != "metadata"}
    name = env or str(row.get("env") or "")
    try:
        from rollgate.resources_servers.families.splits import row_key

        key = row_key(name, body)
    except ImportError:  # an install without the families package: the same idea, fewer rules
        key = (
            name
            + "|"
            + orjson.dumps(
                {k: v for k, v in body.items() if k not in NON_CONTENT_FIELDS}, option=orjson.OPT_SORT_KEYS
            ).decode()
        )
    return hashlib.sha256(key.encode()).hexdigest()


def task_tags(row: dict[str, Any]) -> dict[str, str]:
    """Tags of a row: `tags` as {name: value} or [value, ...] (name "tag"), plus the well-known
    fields dataset, difficulty, category and split. Values are compared as strings."""
    tags: dict[str, str] = {}
    for name in TAG_FIELDS:
        value = row.get(name)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            tags[name] = str(value)
    raw = row.get("tags")
    if isinstance(raw, dict):
        tags.update({str(k): str(v) for k, v in raw.items() if isinstance(v, (str, int, float))})
    elif isinstance(raw, list):
        for i, v in enumerate(x for x in raw if isinstance(x, (str, int, float))):
            tags["tag" if i == 0 else f"tag{i + 1}"] = str(v)
    return tags


class Sample(BaseModel):
    """One line of samples.jsonl."""

    schema_version: int = SAMPLES_SCHEMA_VERSION
    env: str
    task_id: str
    sample_index: int
    content_hash: str
    outcome: Outcome
    reward: float | None = None
    answer: str | None = None  # the environment's comparable final answer, where it exposes one
    tags: dict[str, str] = Field(default_factory=dict)
    trajectory_id: str | None = None
    model: str | None = None
    policy_version: str | None = None
    weight_version: str | None = None
    error: ErrorInfo | None = None

    @property
    def key(self) -> SampleKey:
        return (self.env, self.task_id, self.sample_index)

    @property
    def valid(self) -> bool:
        """Infrastructure failures are not wrong answers: only reward-bearing outcomes count."""
        return self.outcome.has_reward and self.reward is not None


def final_answer(traj: Trajectory) -> str | None:
    """The verifier's extracted final answer (metrics.answer), comparable across samples."""
    answer = traj.metrics.get("answer")
    if answer is None or isinstance(answer, (dict, list)):
        return None
    text = str(answer).strip()
    return text or None


def sample_of(traj: Trajectory, *, content: str, tags: dict[str, str], sample_index: int | None = None) -> Sample:
    weights = [t.weight_version for t in traj.turns if t.weight_version]
    return Sample(
        env=traj.task.env,
        task_id=traj.task.task_id,
        sample_index=traj.sample_index if sample_index is None else sample_index,
        content_hash=content,
        outcome=traj.outcome,
        reward=traj.reward,
        answer=final_answer(traj) if traj.outcome.has_reward else None,
        tags=tags,
        trajectory_id=traj.trajectory_id,
        model=traj.policy.model,
        policy_version=traj.policy.policy_version,
        weight_version=weights[-1] if weights else None,
        error=traj.error,
    )


def _cut_torn_tail(path: Path) -> None:
    """Drop a last line without its newline (the write a crash interrupted)."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
        with open(path, "r+b") as f:
            f.truncate(keep)


class EvalDir:
    """The files of one evaluation directory."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.samples = self.root / "samples.jsonl"
        self.trajectories = self.root / "trajectories.jsonl"
        self.tasks = self.root / "tasks.jsonl"
        self.run = self.root / "run.json"
        self.report_json = self.root / "report.json"
        self.report_html = self.root / "report.html"

    def prepare_append(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        _cut_torn_tail(self.samples)
        _cut_torn_tail(self.trajectories)

    def append(self, traj: Trajectory, sample: Sample) -> None:
        # The trajectory first: a sample line always has its trajectory behind it.
        with open(self.trajectories, "ab") as f:
            f.write(jsonutil.dumps(traj.model_dump(mode="json")) + b"\n")
        with open(self.samples, "ab") as f:
            f.write(jsonutil.dumps(sample.model_dump(mode="json", exclude_none=True)) + b"\n")

    def write_tasks(self, rows: Iterable[dict[str, Any]]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.tasks.write_bytes(b"".join(jsonutil.dumps(r) + b"\n" for r in rows))


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if raw.strip() and raw.endswith(b"\n"):  # a torn last line is not a record yet
                yield n, raw


def read_samples(path: Path) -> dict[SampleKey, Sample]:
    """The last line per sample key; a line of an unknown schema is an error naming the field."""
    out: dict[SampleKey, Sample] = {}
    for n, raw in _lines(path):
        try:
            data = jsonutil.loads(raw)
        except jsonutil.JSONDecodeError:
            raise BadRequest(f"{path}:{n}: not JSON", component=COMPONENT, field="samples") from None
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != SAMPLES_SCHEMA_VERSION:
            raise BadRequest(
                f"{path}:{n}: schema_version {version!r} is not a samples schema this Rollgate reads "
                f"({SAMPLES_SCHEMA_VERSION})",
                component=COMPONENT,
                field="schema_version",
            )
        try:
            s = Sample.model_validate(data)
        except ValidationError as exc:
            raise field_error(exc, component=COMPONENT, where=f"{path}:{n}: ", default="line") from None
        out[s.key] = s
    return out


def check_trajectory_version(data: Any, where: str) -> None:
    version = data.get("schema_version") if isinstance(data, dict) else None
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= SCHEMA_VERSION:
        raise BadRequest(
            f"{where}: schema_version {version!r} is not a trajectory schema this Rollgate reads "
            f"(1..{SCHEMA_VERSION}); re-verify it with the Rollgate version that wrote it",
            component=COMPONENT,
            field="schema_version",
        )


def read_trajectories(path: Path) -> Iterator[Trajectory]:
    """Trajectories of a JSONL file, each checked: an unknown schema version is an error that
    names the field and the line, never a guess."""
    for n, raw in _lines(path):
        try:
            data = jsonutil.loads(raw)
        except jsonutil.JSONDecodeError:
            raise BadRequest(f"{path}:{n}: not JSON", component=COMPONENT, field="line") from None
        if isinstance(data, dict) and "outcome" not in data and "error" in data:
            continue  # a FailureRecord of `rollgate collect`: a row that never became an episode
        check_trajectory_version(data, f"{path}:{n}")
        try:
            yield Trajectory.model_validate(data)
        except ValidationError as exc:
            raise field_error(exc, component=COMPONENT, where=f"{path}:{n}: ", default="line") from None


def read_jsonl_rows(path: Path, what: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) per non-blank line; anything else is an error naming the line."""
    if not path.is_file():
        raise BadRequest(f"{what} {path}: no such file", component=COMPONENT, field=what)
    rows = []
    for n, raw in enumerate(path.read_bytes().splitlines(), 1):
        if not raw.strip():
            continue
        try:
            row = jsonutil.loads(raw)
        except jsonutil.JSONDecodeError as exc:
            raise BadRequest(f"{what} {path}:{n}: not JSON ({exc})", component=COMPONENT, field=what) from None
        if not isinstance(row, dict):
            raise BadRequest(f"{what} {path}:{n}: not a JSON object", component=COMPONENT, field=what)
        rows.append((n, row))
    return rows
