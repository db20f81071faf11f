"""Task rows at the edge: the one place raw JSON becomes a TaskRow.

Every door a task comes in by (a job submitted to the gateway, `rollgate collect` reading a
file, the agent server's POST /run, a resources server's seed route, a trainer's rows) calls
`parse_row` once. From then on the parsed `Task` travels with the rollout: its row, id,
environment and row index are never re-derived or re-validated downstream. A task that crossed
a process boundary after parsing (the job queue) is rebuilt with `Task.trusted`, which skips
validation because the edge already did it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from rollgate.core import jsonutil
from rollgate.core.errors import BadRequest, field_error
from rollgate.core.row_params import ParamError
from rollgate.core.schemas import TaskRow


@dataclass(frozen=True, slots=True)
class Task:
    """A parsed task row and its identity."""

    row: TaskRow
    task_id: str
    env: str
    row_index: int | None = None  # position in the submitted job or file, where there is one

    @classmethod
    def trusted(cls, row: dict[str, Any], *, task_id: str, env: str, row_index: int | None = None) -> Task:
        """A task parsed earlier by `parse_row` (e.g. carried through the job queue): no re-validation."""
        return cls(row=TaskRow.model_construct(**row), task_id=task_id, env=env, row_index=row_index)

    def dump(self) -> dict[str, Any]:
        """The row as JSON, as recorded on the trajectory and sent to a resources server."""
        return self.row.row()


def stable_task_id(row: dict[str, Any]) -> str:
    """A task id for rows that carry none: the same row always gets the same id (resume works)."""
    body = {k: v for k, v in row.items() if k != "task_id"}
    return "t_" + hashlib.sha1(jsonutil.dumps(body)).hexdigest()[:16]


def group_id(task_id: str, *, job_id: str | None, row_index: int | None) -> str:
    """The one group id format: the samples of one row of one job form a group (GRPO's unit)."""
    key = f"{job_id or ''}|{row_index if row_index is not None else ''}|{task_id}"
    return "grp_" + hashlib.sha1(key.encode()).hexdigest()[:20]


def derive_seed(*parts: object) -> int:
    """A 31-bit seed of its own for `parts` (a job's seed and a task, a seed and a turn, a family
    and an index): reproducible, and independent of the seed any other parts give."""
    key = ":".join(map(str, parts)).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "big") >> 1


def parse_row(
    raw: Any,
    *,
    env: str | None = None,
    known_envs: Collection[str] | None = None,
    row_index: int | None = None,
    where: str = "",
    component: str = "rollgate",
) -> Task:
    """Validate one raw row; BadRequest names the field (`where` prefixes it, e.g. "tasks[3]").

    The row's own `env` wins over `env` (the job's or the caller's default); with `known_envs`
    the result must be one of them."""

    def at(name: str) -> str:
        return ".".join(p for p in (where, name) if p) or "row"

    if isinstance(raw, TaskRow):
        row = raw  # validated where it came in (e.g. a trainer's TaskIndex)
    elif not isinstance(raw, dict):
        raise BadRequest(f"{at('')}: a task row must be a JSON object", component=component, field=at(""))
    else:
        try:
            row = TaskRow.model_validate(raw, strict=True)  # as its JSON schema says (no "3" for 3)
        except ValidationError as exc:
            e = exc.errors()[0]
            cause = (e.get("ctx") or {}).get("error")
            if isinstance(cause, ParamError):  # TaskRow's check of responses_create_params: name the field
                field = at(f"responses_create_params.{cause.field}")
                raise BadRequest(f"{field}: {cause.message}", component=component, field=field) from None
            raise field_error(exc, component=component, prefix=where, default=at("")) from None
    name = row.env or env
    if name is None:
        raise BadRequest(
            f"{at('env')}: the row names no environment and none was given", component=component, field=at("env")
        )
    if known_envs is not None and name not in known_envs:
        raise BadRequest(
            f"{at('env')}: unknown environment {name!r}; known: {', '.join(sorted(known_envs)) or 'none'}",
            component=component,
            field=at("env"),
        )
    task_id = row.task_id or stable_task_id(row.row())
    return Task(row=row, task_id=task_id, env=name, row_index=row_index)
