"""`rollgate export`: round trips, SFT filtering, and all-or-nothing error handling."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rollgate.cli import main
from rollgate.core.schemas import Outcome, Trajectory
from rollgate.trainer_adapters.exports import ExportError, export, read_trajectories
from rollgate.trainer_adapters.parquet import read_parquet
from tests.trainer_adapters import builders


def write_input(path: Path, trajs: list[Trajectory], extra_lines: list[str] = ()) -> Path:
    lines = [t.model_dump_json() for t in trajs] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n")
    return path


def sample() -> list[Trajectory]:
    return [
        builders.trajectory(reward=1.0, index=0),
        builders.trajectory(reward=0.0, index=1),
        builders.trajectory(Outcome.truncated, reward=0.5, index=2),
        builders.trajectory(Outcome.env_error, index=3),
    ]


FAILURE_LINE = json.dumps(
    {
        "schema_version": 1,
        "line": 9,
        "error": {"kind": "bad_request", "message": "row 9 has no input", "component": "gateway"},
    }
)


def test_jsonl_round_trip_is_exact_and_skips_failure_records(tmp_path):
    src = write_input(tmp_path / "in.jsonl", sample(), [FAILURE_LINE])
    stats = export(src, tmp_path / "out.jsonl", "jsonl")
    assert (stats.read, stats.written, stats.skipped_failures) == (4, 4, 1)
    back = list(read_trajectories(tmp_path / "out.jsonl"))
    assert [t.model_dump() for t in back] == [t.model_dump() for t in sample()]


def test_parquet_is_readable_by_pyarrow_and_round_trips(tmp_path):
    src = write_input(tmp_path / "in.jsonl", sample())
    export(src, tmp_path / "out.parquet", "parquet")
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.num_rows == 4
    cols = table.to_pydict()
    assert cols["outcome"] == ["completed", "completed", "truncated", "env_error"]
    assert cols["reward"] == [1.0, 0.0, 0.5, None]
    assert cols["num_turns"] == [3, 3, 3, 3]
    assert cols["generated_tokens"][0] == sum(len(g) for g in builders.GEN)
    assert cols["turns"][0][2]["generation_token_ids"] == builders.GEN[2]
    assert dict(cols["reward_components"][0]) == {"correct": 0.75, "format": 0.25}
    assert cols["error_component"][3] == "env"
    back = list(read_parquet(tmp_path / "out.parquet"))
    assert [t.model_dump() for t in back] == [t.model_dump() for t in sample()]


def test_sft_keeps_only_successful_episodes_as_chat_transcripts(tmp_path):
    src = write_input(tmp_path / "in.jsonl", sample())
    stats = export(src, tmp_path / "sft.jsonl", "sft")
    records = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert [r["trajectory_id"] for r in records] == ["traj_g1_0"]  # completed with reward > 0 only
    assert stats.filtered == 3
    msgs = records[0]["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert msgs[2]["tool_calls"][0]["function"] == {"name": "calculator", "arguments": {"expression": "12*7"}}
    assert msgs[3] == {"role": "tool", "tool_call_id": "c1", "content": "84"}
    assert msgs[4]["reasoning_content"] == "add three"
    assert msgs[6] == {"role": "assistant", "content": "The answer is 87."}
    assert records[0]["tools"][0]["function"]["name"] == "calculator"


def test_sft_reward_threshold_can_admit_zero_reward_and_exclude_others(tmp_path):
    src = write_input(tmp_path / "in.jsonl", sample())
    export(src, tmp_path / "a.jsonl", "sft", min_reward=0.0)
    assert len((tmp_path / "a.jsonl").read_text().splitlines()) == 2  # both completed ones
    export(src, tmp_path / "b.jsonl", "sft", min_reward=1.5)
    assert (tmp_path / "b.jsonl").read_text() == ""


def test_min_reward_filters_jsonl_and_drops_failed_episodes(tmp_path):
    src = write_input(tmp_path / "in.jsonl", sample())
    stats = export(src, tmp_path / "out.jsonl", "jsonl", min_reward=0.5)
    kept = [t.trajectory_id for t in read_trajectories(tmp_path / "out.jsonl")]
    assert kept == ["traj_g1_0", "traj_g1_2"] and stats.filtered == 2


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "sft"])
@pytest.mark.parametrize(
    "bad, line, words",
    [
        ("{not json", 3, "not valid JSON"),
        (json.dumps({**builders.trajectory().model_dump(mode="json"), "schema_version": 99}), 3, "schema_version 99"),
        (json.dumps({**builders.trajectory().model_dump(mode="json"), "outcome": "exploded"}), 3, "outcome"),
    ],
)
def test_bad_line_fails_with_its_number_and_leaves_no_file(tmp_path, fmt, bad, line, words):
    src = write_input(tmp_path / "in.jsonl", sample()[:2], [bad])
    dst = tmp_path / f"out.{fmt}"
    with pytest.raises(ExportError) as info:
        export(src, dst, fmt)
    assert info.value.line == line and f"line {line}" in info.value.message and words in info.value.message
    assert list(tmp_path.iterdir()) == [src]  # neither the output nor a temporary file remains


def test_bad_input_keeps_an_existing_output_untouched(tmp_path):
    dst = tmp_path / "out.jsonl"
    dst.write_text("previous export\n")
    src = write_input(tmp_path / "in.jsonl", sample(), ["[1, 2]"])
    with pytest.raises(ExportError):
        export(src, dst, "jsonl")
    assert dst.read_text() == "previous export\n"


def test_cli_reports_the_bad_line_and_exits_2(tmp_path, capsys):
    src = write_input(tmp_path / "in.jsonl", sample(), ['{"schema_version": "one"}'])
    code = main(["export", "--in", str(src), "--out", str(tmp_path / "o.parquet"), "--format", "parquet"])
    err = capsys.readouterr().err
    assert code == 2 and "line 5" in err and "schema_version" in err
    assert not (tmp_path / "o.parquet").exists()


def test_cli_exports_and_summarises(tmp_path, capsys):
    src = write_input(tmp_path / "in.jsonl", sample())
    code = main(
        ["export", "--in", str(src), "--out", str(tmp_path / "s.jsonl"), "--format", "sft", "--min-reward", "0.5"]
    )
    assert code == 0
    assert "wrote 1 of 4 trajectories" in capsys.readouterr().out


def test_missing_input_file_is_a_clear_error(tmp_path):
    with pytest.raises(ExportError) as info:
        export(tmp_path / "absent.jsonl", tmp_path / "o.jsonl", "jsonl")
    assert info.value.field == "in" and "cannot read" in info.value.message


def test_exporting_a_task_file_says_it_is_tasks_not_trajectories(tmp_path, capsys):
    from rollgate.cli import main

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"responses_create_params": {"input": "2+2?"}, "expected_answer": "4"}) + "\n")
    assert main(["export", "--in", str(tasks), "--out", str(tmp_path / "out.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "task row, not a trajectory" in err and "rollgate collect" in err
    assert not (tmp_path / "out.jsonl").exists()
