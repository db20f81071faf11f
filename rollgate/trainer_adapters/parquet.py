"""Trajectories as Parquet: flat columns for filtering and statistics (ids, outcome, reward, token
counts) plus the exact token data as a nested `turns` list. Free-form parts (transcript, task row,
metrics, sampling) are JSON strings: their shape varies per environment and Parquet needs one
schema per file."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rollgate.core import jsonutil
from rollgate.core.schemas import Trajectory

PARQUET_EXTRA = "pip install 'rollgate[parquet]'"

try:
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError:  # the optional `parquet` extra: only Parquet export needs it
    raise ModuleNotFoundError(
        f"Parquet export needs pyarrow, which is not installed: {PARQUET_EXTRA}", name="pyarrow"
    ) from None

TURN_TYPE = pa.struct(
    [
        ("prompt_token_ids", pa.list_(pa.int32())),
        ("generation_token_ids", pa.list_(pa.int32())),
        # float64 keeps the log-probs bit-exact through a round trip (importance ratios depend on them).
        ("generation_log_probs", pa.list_(pa.float64())),
        ("finish_reason", pa.string()),
        ("weight_version", pa.string()),
    ]
)
TIMINGS_TYPE = pa.struct([(k, pa.float64()) for k in ("total_s", "model_s", "tools_s", "verify_s", "seed_s")])

SCHEMA = pa.schema(
    [
        ("schema_version", pa.int32()),
        ("trajectory_id", pa.string()),
        ("group_id", pa.string()),
        ("sample_index", pa.int32()),
        ("role", pa.string()),  # multi-role episodes (docs/roles.md); null on single-role ones
        ("episode_id", pa.string()),
        ("job_id", pa.string()),
        ("env", pa.string()),
        ("task_id", pa.string()),
        ("seed", pa.int64()),
        ("model", pa.string()),
        ("policy_version", pa.string()),
        ("outcome", pa.string()),
        ("reward", pa.float64()),
        ("reward_components", pa.map_(pa.string(), pa.float64())),
        ("error_kind", pa.string()),
        ("error_message", pa.string()),
        ("error_component", pa.string()),
        ("error_field", pa.string()),
        ("num_turns", pa.int32()),
        ("segmented", pa.bool_()),  # the turns are separate segments, not one sequence (schema 3)
        ("prompt_tokens", pa.int32()),
        ("generated_tokens", pa.int32()),
        ("turns", pa.list_(TURN_TYPE)),
        ("timings", TIMINGS_TYPE),
        ("messages_json", pa.string()),
        ("task_row_json", pa.string()),
        ("sampling_json", pa.string()),
        ("metrics_json", pa.string()),
    ],
    metadata={b"rollgate.format": b"trajectories"},
)


def to_row(t: Trajectory) -> dict[str, Any]:
    err = t.error
    return {
        "schema_version": t.schema_version,
        "trajectory_id": t.trajectory_id,
        "group_id": t.group_id,
        "sample_index": t.sample_index,
        "role": t.role,
        "episode_id": t.episode_id,
        "job_id": t.job_id,
        "env": t.task.env,
        "task_id": t.task.task_id,
        "seed": t.task.seed,
        "model": t.policy.model,
        "policy_version": t.policy.policy_version,
        "outcome": t.outcome.value,
        "reward": t.reward,
        "reward_components": list(t.reward_components.items()) if t.reward_components is not None else None,
        "error_kind": err.kind.value if err else None,
        "error_message": err.message if err else None,
        "error_component": err.component if err else None,
        "error_field": err.field if err else None,
        "num_turns": len(t.turns),
        "segmented": t.segmented,
        "prompt_tokens": len(t.turns[0].prompt_token_ids) if t.turns else 0,
        "generated_tokens": sum(len(x.generation_token_ids) for x in t.turns),
        "turns": [x.model_dump() for x in t.turns],
        "timings": t.timings.model_dump(),
        "messages_json": jsonutil.dumps_str(t.messages),
        "task_row_json": jsonutil.dumps_str(t.task.row),
        "sampling_json": jsonutil.dumps_str(t.policy.sampling),
        "metrics_json": jsonutil.dumps_str(t.metrics),
    }


def from_row(r: dict[str, Any]) -> Trajectory:
    error = None
    if r.get("error_kind"):
        error = {
            "kind": r["error_kind"],
            "message": r["error_message"],
            "component": r["error_component"],
            "field": r.get("error_field"),
        }
    comps = r.get("reward_components")
    return Trajectory.model_validate(
        {
            "schema_version": r["schema_version"],
            "trajectory_id": r["trajectory_id"],
            "group_id": r["group_id"],
            "sample_index": r["sample_index"],
            "role": r.get("role"),  # absent in files written before roles
            "episode_id": r.get("episode_id"),
            "job_id": r["job_id"],
            "task": {
                "env": r["env"],
                "task_id": r["task_id"],
                "seed": r["seed"],
                "row": jsonutil.loads(r["task_row_json"]),
            },
            "policy": {
                "model": r["model"],
                "policy_version": r["policy_version"],
                "sampling": jsonutil.loads(r["sampling_json"]),
            },
            "messages": jsonutil.loads(r["messages_json"]),
            "turns": r["turns"],
            "segmented": bool(r.get("segmented")),  # absent in files written before schema 3
            "reward": r["reward"],
            "reward_components": dict(comps) if comps is not None else None,
            "metrics": jsonutil.loads(r["metrics_json"]),
            "outcome": r["outcome"],
            "error": error,
            "timings": r["timings"],
        }
    )


def write_parquet(trajs: Iterable[Trajectory], path: Path, *, batch_rows: int = 256) -> int:
    """Write in row groups of `batch_rows`, so memory stays bounded on large files."""
    n = 0
    with pq.ParquetWriter(str(path), SCHEMA, compression="zstd") as writer:
        batch: list[dict[str, Any]] = []
        for t in trajs:
            batch.append(to_row(t))
            n += 1
            if len(batch) >= batch_rows:
                writer.write_table(pa.Table.from_pylist(batch, schema=SCHEMA))
                batch = []
        if batch or n == 0:
            writer.write_table(pa.Table.from_pylist(batch, schema=SCHEMA))
    return n


def read_parquet(path: Path) -> Iterator[Trajectory]:
    pf = pq.ParquetFile(str(path))
    for batch in pf.iter_batches():
        for r in batch.to_pylist():
            yield from_row(r)
