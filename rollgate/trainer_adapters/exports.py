"""`rollgate export`: trajectory JSONL -> jsonl | parquet | sft, all or nothing.

Multi-role trajectories (docs/roles.md) are exported one sample per role's trajectory with its
`role` and `episode_id` kept (every role, for shared weights), or only the roles asked for.

Every input line is validated (JSON, schema_version, the Trajectory schema) before the output
exists under its final name: output goes to a temporary file beside the target and is renamed into
place only when the whole input was read, so a bad line never leaves a partial file behind.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from rollgate.core import jsonutil
from rollgate.core.errors import BadRequest, field_of, validation_summary
from rollgate.core.schemas import SCHEMA_VERSION, Trajectory
from rollgate.trainer_adapters.sft import keep_for_sft, to_sft_record

log = logging.getLogger(__name__)


class ExportFormat(str, enum.Enum):
    jsonl = "jsonl"
    parquet = "parquet"
    sft = "sft"


class ExportError(BadRequest):
    """Bad export input: names the file, the line and the field."""

    def __init__(self, message: str, *, line: int | None = None, field: str | None = None):
        where = f"line {line}: " if line is not None else ""
        super().__init__(where + message, component="export", field=field)
        self.line = line


@dataclass
class ExportStats:
    read: int = 0  # trajectory records in the input
    written: int = 0
    skipped_failures: int = 0  # FailureRecord lines (tasks that never became trajectories)
    filtered: int = 0  # trajectories left out by the format's or the threshold's filter
    other_roles: int = 0  # trajectories of roles not asked for (or of no role) with `roles`
    roles_seen: set[str] = field(default_factory=set)  # the roles of the input's trajectories


def read_trajectories(path: Path, stats: ExportStats | None = None) -> Iterator[Trajectory]:
    """Yield the trajectories of a JSONL file; raise ExportError naming the first bad line.
    FailureRecord lines (no `outcome`, an `error`) are counted and skipped: they hold no episode."""
    stats = stats if stats is not None else ExportStats()
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed by the `with` below, after the error mapping
    except OSError as exc:
        raise ExportError(f"cannot read {path}: {exc.strerror}", field="in") from None
    with fh:
        for line_no, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                obj = jsonutil.loads(raw)
            except ValueError as exc:
                raise ExportError(f"not valid JSON ({exc})", line=line_no) from None
            if not isinstance(obj, dict):
                raise ExportError("a record must be a JSON object", line=line_no)
            version = obj.get("schema_version")
            if version is None and "responses_create_params" in obj:
                # the most common mistake: a task file (the input of collect) given as --in
                raise ExportError(
                    "this is a task row, not a trajectory: export reads what `rollgate collect` or "
                    "`GET /v1/rollouts/{job}/results` wrote; collect rollouts for these tasks first "
                    "(`rollgate collect --tasks FILE --out trajectories.jsonl`)",
                    line=line_no,
                    field="schema_version",
                )
            if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= SCHEMA_VERSION:
                raise ExportError(
                    f"schema_version {version!r} is not supported (this Rollgate reads 1..{SCHEMA_VERSION})",
                    line=line_no,
                    field="schema_version",
                )
            if "outcome" not in obj and "error" in obj:
                stats.skipped_failures += 1
                continue
            try:
                traj = Trajectory.model_validate(obj)
            except ValidationError as exc:
                loc = field_of(exc.errors()[0]) or None
                raise ExportError(
                    f"not a valid trajectory: {validation_summary(exc, default='record', limit=1)}",
                    line=line_no,
                    field=loc,
                ) from None
            stats.read += 1
            yield traj


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[Path]:
    """A temporary path beside `path`, renamed onto it only if the block succeeds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _selected(
    trajs: Iterator[Trajectory],
    fmt: ExportFormat,
    min_reward: float | None,
    roles: frozenset[str] | None,
    stats: ExportStats,
) -> Iterator[Trajectory]:
    for t in trajs:
        if t.role is not None:
            stats.roles_seen.add(t.role)
        if roles is not None and t.role not in roles:
            stats.other_roles += 1
            continue
        if fmt is ExportFormat.sft:
            keep = keep_for_sft(t, min_reward)
        else:
            keep = min_reward is None or (t.reward is not None and t.reward >= min_reward)
        if keep:
            stats.written += 1
            yield t
        else:
            stats.filtered += 1


def check_roles(asked: frozenset[str], seen: set[str]) -> None:
    """Every role asked for must be a role of the input: a typo must not export an empty file."""
    unknown = sorted(asked - seen)
    if not unknown:
        return
    if not seen:
        raise ExportError(
            f"--role {unknown[0]}: the input holds no multi-role trajectories (none has a `role`); "
            "--role selects among the per-role trajectories of `rollgate collect --roles` (docs/roles.md)",
            field="role",
        )
    raise ExportError(
        f"--role {unknown[0]}: no trajectory of this role in the input; its roles are {', '.join(sorted(seen))}",
        field="role",
    )


def export(
    src: Path,
    dst: Path,
    fmt: ExportFormat | str,
    *,
    min_reward: float | None = None,
    roles: Sequence[str] | None = None,
) -> ExportStats:
    """Export `src` (trajectory JSONL) to `dst`. With `min_reward`, keep only trajectories whose
    reward is >= it (failed ones have none and are left out); sft keeps completed episodes only.
    With `roles`, keep only the trajectories of those roles (multi-role input; an unknown role is
    an ExportError naming the input's roles); without, every role's trajectory is a sample."""
    fmt = ExportFormat(fmt)
    asked = frozenset(roles) if roles else None
    if Path(src).resolve() == Path(dst).resolve():
        raise ExportError("--out must differ from --in", field="out")
    if fmt is ExportFormat.parquet:
        try:  # here, not at the top: pyarrow is the optional `parquet` extra
            from rollgate.trainer_adapters.parquet import write_parquet
        except ImportError as exc:
            raise ExportError(str(exc), field="format") from None
    stats = ExportStats()
    trajs = _selected(read_trajectories(Path(src), stats), fmt, min_reward, asked, stats)
    with atomic_output(Path(dst)) as tmp:
        if fmt is ExportFormat.parquet:
            write_parquet(trajs, tmp)
        else:
            with open(tmp, "wb") as out:
                for t in trajs:
                    record = to_sft_record(t) if fmt is ExportFormat.sft else t.model_dump(mode="json")
                    out.write(jsonutil.dumps(record) + b"\n")
        if asked is not None:
            check_roles(asked, stats.roles_seen)  # before the rename: no file for a bad --role
    log.info(
        "exported %d of %d trajectories to %s (%s); %d filtered, %d of other roles, %d failure records skipped",
        stats.written,
        stats.read,
        dst,
        fmt.value,
        stats.filtered,
        stats.other_roles,
        stats.skipped_failures,
    )
    return stats
