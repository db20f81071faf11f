"""Trajectory schema versions: version 2 adds row_index and attempts; version 1 records (written
before) still read, and a newer version than this code knows is refused, not guessed at."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rollgate.core.schemas import SCHEMA_VERSION, Trajectory


def v1_record() -> dict:
    return {
        "schema_version": 1,
        "trajectory_id": "traj_1",
        "group_id": "grp_t1",
        "sample_index": 0,
        "task": {"env": "math", "task_id": "t1", "row": {"responses_create_params": {"input": "x"}}},
        "policy": {"model": "m"},
        "outcome": "completed",
        "reward": 1.0,
    }


def test_version_one_records_still_read():
    traj = Trajectory.model_validate(v1_record())
    assert traj.schema_version == 1 and traj.row_index is None and traj.attempts == 1
    assert traj.model_dump(mode="json")["schema_version"] == 1  # re-exported as what it is


def test_new_records_carry_their_row_index():
    traj = Trajectory.model_validate({**v1_record(), "schema_version": SCHEMA_VERSION, "row_index": 3})
    assert SCHEMA_VERSION == 3 and traj.row_index == 3 and traj.segmented is False


def test_a_newer_version_is_refused():
    with pytest.raises(ValidationError, match="newer"):
        Trajectory.model_validate({**v1_record(), "schema_version": SCHEMA_VERSION + 1})
