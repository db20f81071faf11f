"""Structured logs carry the job, trajectory and session ids bound once with log_context()."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from rollgate.core.logging import current_log_context, log_context, setup_logging

log = logging.getLogger("rollgate.test.obs")


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def test_json_logs_carry_ids_bound_once_including_in_child_tasks_and_threads(capsys, restore_root_logging):
    setup_logging("INFO", json_logs=True)
    with log_context(job_id="job_1", trajectory_id="traj_1", env="math"):
        log.info("in the block")
        await asyncio.create_task(asyncio.sleep(0, result=None))
        await asyncio.create_task(_log_later("in a child task"))
        await asyncio.to_thread(log.info, "in a worker thread")
        with log_context(session_id="sess_1"):
            log.warning("in a nested block")
    log.info("after the block")
    records = {r["msg"]: r for r in json_lines(capsys.readouterr().err)}
    for msg in ("in the block", "in a child task", "in a worker thread", "in a nested block"):
        assert records[msg]["job_id"] == "job_1", msg
        assert records[msg]["trajectory_id"] == "traj_1", msg
        assert records[msg]["env"] == "math", msg
    assert records["in a nested block"]["session_id"] == "sess_1"
    assert records["in a nested block"]["level"] == "WARNING"
    assert "session_id" not in records["in a child task"]
    assert not {"job_id", "trajectory_id", "env"} & set(records["after the block"])


async def _log_later(msg: str) -> None:
    await asyncio.sleep(0.01)
    log.info(msg)


async def test_concurrent_episodes_never_see_each_others_ids(capsys, restore_root_logging):
    setup_logging("INFO", json_logs=True)

    async def episode(n: int) -> None:
        with log_context(trajectory_id=f"traj_{n}", session_id=f"sess_{n}"):
            for step in range(3):
                await asyncio.sleep(0.001 * ((n + step) % 3))  # interleave the episodes
                log.info("episode %d step %d", n, step)

    await asyncio.gather(*(episode(n) for n in range(8)))
    records = json_lines(capsys.readouterr().err)
    assert len(records) == 24
    for r in records:
        n = int(r["msg"].split()[1])
        assert r["trajectory_id"] == f"traj_{n}" and r["session_id"] == f"sess_{n}"


def test_explicit_extra_wins_over_the_bound_id(capsys, restore_root_logging):
    setup_logging("INFO", json_logs=True)
    with log_context(job_id="job_bound"):
        log.info("override", extra={"job_id": "job_explicit"})
    assert json_lines(capsys.readouterr().err)[0]["job_id"] == "job_explicit"


def test_plain_logs_append_the_bound_ids(capsys, restore_root_logging):
    setup_logging("INFO", json_logs=False)
    with log_context(job_id="job_9", task_id="t-3"):
        log.info("plain")
    line = capsys.readouterr().err.strip()
    assert line.endswith("plain [job_id=job_9 task_id=t-3]")


def test_unknown_context_field_is_an_error_naming_it():
    with pytest.raises(ValueError, match="trajectory"), log_context(trajectory="traj_1"):  # a typo of trajectory_id
        pass
    assert current_log_context() == {}


def test_none_values_are_not_bound():
    with log_context(job_id="job_1", session_id=None):
        assert current_log_context() == {"job_id": "job_1"}
