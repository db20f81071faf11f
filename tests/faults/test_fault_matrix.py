"""The fault matrix (`pytest -m faults`, not in the default run): the cluster shape as real
processes on loopback (tests/faults/cluster.py), one fault per case injected mid-job while a
trainer streams the job's results with rollgate.client.RolloutClient, resuming by cursor.

Every case must end with exactly one record per task, no duplicates, no infrastructure failure
recorded as a reward (it is env_error / model_error / timeout with reward None; every task's right
answer is 42, so a completed episode scores 1.0), the job `done` (not lost, not failed), and in
bounded time: a watchdog cancels a job that runs past DEADLINE_S, which fails the case. Jobs set
`retry_errors`, so most infrastructure failures are re-run as fresh episodes. Each case prints a
table row and adds it to test-artifacts/fault-matrix.json.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rollgate.client.gateway import RolloutClient
from tests.faults.cluster import SETTINGS, START_TIMEOUT_S, FaultCluster

pytestmark = [pytest.mark.faults, pytest.mark.timeout(900)]

TASKS = 300
DELAY_S = 0.15  # per model turn: with 2 x 8 episodes in flight a job lasts seconds, so faults land mid-job
RETRY_ERRORS = 4  # backoff 1, 2, 4, 8 s (jittered) between attempts: outlasts a restart of any part
DEADLINE_S = 240.0  # bounded completion; generous because the machine is shared
FAULT_AT = TASKS // 4  # records streamed before the fault
INFRA = {"env_error", "model_error", "timeout"}
ARTIFACT = Path(__file__).resolve().parents[2] / "test-artifacts" / "fault-matrix.json"
TABLE: dict[str, dict[str, Any]] = {}


def task_rows(case: str, n: int) -> list[dict[str, Any]]:
    script = [
        {"call": {"name": "calculator", "arguments": {"expression": "6*7"}}, "delay_s": DELAY_S},
        {"text": "Answer: 42", "delay_s": DELAY_S},
    ]
    return [
        {
            "responses_create_params": {
                "input": f"What is 6*7? ({case} {i})",
                "metadata": {"rollgate_script": json.dumps(script)},
            },
            "expected_answer": "42",
            "task_id": f"{case}-{i:04d}",
        }
        for i in range(n)
    ]


# The faults. Each runs on its own thread once FAULT_AT records are in, while the trainer reads on.
def kill_agent_worker(c: FaultCluster) -> None:
    c.proc("agent", 0).kill(signal.SIGKILL)  # stays dead: its claims move to the other worker


def kill_resources_replica(c: FaultCluster) -> None:
    c.proc("resources-math", 0).kill(signal.SIGKILL)  # stays dead: calls go to the other replica


def restart_model_server(c: FaultCluster) -> None:
    model = c.proc("model")
    model.kill(signal.SIGKILL)
    time.sleep(1.0)
    model.start(START_TIMEOUT_S)  # same port: the workers' clients reconnect


def hang_model_server(c: FaultCluster) -> None:
    model = c.proc("model")
    c.hang(model)
    # Past the 3 s model timeout and its 2 retries within the episode (9 s): calls in flight give
    # up, their episodes end model_error or timeout and are re-run.
    time.sleep(12.0)
    c.resume(model)


def restart_gateway(c: FaultCluster) -> None:
    gateway = c.proc("gateway")
    gateway.kill(signal.SIGKILL)  # the trainer's stream breaks; it resumes by cursor
    time.sleep(1.0)
    gateway.start(START_TIMEOUT_S)


def restart_redis(c: FaultCluster) -> None:
    c.redis.restart(signal.SIGTERM, down_s=2.0)  # the AOF brings the queue and the sessions back


def crash_redis(c: FaultCluster) -> None:
    # A crash of the process. appendfsync everysec delays only the fsync: Redis writes the AOF
    # before it answers, and the page cache outlives the process (a crash of the machine could
    # lose up to a second, which no test here can stage).
    c.redis.restart(signal.SIGKILL, down_s=2.0)


def crash_redis_for_5s(c: FaultCluster) -> None:
    # Down long enough that workers give up storing the records of episodes that end meanwhile:
    # their claims stay pending under live workers, which must give them back once Redis returns
    # rather than leave them to the visibility timeout (rollgate.jobs.redis_reclaim).
    c.redis.restart(signal.SIGKILL, down_s=5.0)


# case -> (fault, the job's retry_errors). The case without retries shows the failures that the
# retries absorb elsewhere: typed, with no reward.
CASES: dict[str, tuple[Callable[[FaultCluster], None], int]] = {
    "agent_worker_sigkill": (kill_agent_worker, RETRY_ERRORS),
    "resources_replica_sigkill": (kill_resources_replica, RETRY_ERRORS),
    "model_server_sigkill_restart": (restart_model_server, RETRY_ERRORS),
    "model_server_sigkill_restart_no_retries": (restart_model_server, 0),
    "model_server_sigstop": (hang_model_server, RETRY_ERRORS),
    "gateway_sigkill_restart": (restart_gateway, RETRY_ERRORS),
    "redis_restart": (restart_redis, RETRY_ERRORS),
    "redis_sigkill_restart": (crash_redis, RETRY_ERRORS),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = FaultCluster(tmp_path_factory.mktemp("fault-logs"))
    try:
        yield c.start()
    finally:
        c.close()


@pytest.fixture
def healed(cluster):
    cluster.heal()  # every case starts from the full shape, whatever the previous one left
    return cluster


class Fault(threading.Thread):
    def __init__(self, cluster: FaultCluster, action: Callable[[FaultCluster], None]):
        super().__init__(name="fault", daemon=True)
        self.cluster, self.action = cluster, action
        self.go = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        self.go.wait()
        try:
            self.action(self.cluster)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def cancel_job(cluster: FaultCluster, job_id: str) -> None:
    with RolloutClient(cluster.gateway_url, api_key=cluster.token) as client:
        client.cancel(job_id)


def record_key(record: dict[str, Any]) -> str:
    return record["task"]["task_id"] if "task" in record else record["task_id"]


@pytest.mark.parametrize("case", list(CASES))
def test_every_task_yields_exactly_one_record_through_the_fault(healed, case):
    action, retry_errors = CASES[case]
    run_case(healed, case, action, retry_errors)


@pytest.fixture(scope="module")
def default_timeouts(tmp_path_factory):
    """The shape with the default visibility timeout (60 s), where a claim left to it shows."""
    settings = {k: v for k, v in SETTINGS.items() if k != "ROLLGATE_GATEWAY__VISIBILITY_TIMEOUT_S"}
    c = FaultCluster(tmp_path_factory.mktemp("fault-logs-defaults"), settings=settings)
    try:
        yield c.start()
    finally:
        c.close()


def test_claims_lost_with_a_redis_crash_are_reclaimed_within_seconds_at_default_settings(default_timeouts):
    row = run_case(default_timeouts, "redis_sigkill_5s_default_visibility", crash_redis_for_5s, RETRY_ERRORS)
    assert row["seconds"] < 45, f"the job took {row['seconds']}s: lost claims waited for the 60 s visibility timeout"


def run_case(
    healed: FaultCluster, case: str, action: Callable[[FaultCluster], None], retry_errors: int
) -> dict[str, Any]:
    rows = task_rows(case, TASKS)
    client = RolloutClient(healed.gateway_url, api_key=healed.token, timeout_s=30, max_reconnects=40)
    fault = Fault(healed, action)
    fault.start()
    started = time.monotonic()
    job_id = client.submit(rows, env="math", policy_version="faults", retry_errors=retry_errors)["job_id"]
    # The watchdog: a job still running at the deadline is cancelled, which ends its stream.
    watchdog = threading.Timer(DEADLINE_S, cancel_job, (healed, job_id))
    watchdog.start()
    records: list[dict[str, Any]] = []
    end: dict[str, Any] = {}
    fault_at = None
    try:
        for line in client.results(job_id):
            if line["type"] == "end":
                end = line["progress"]
                break
            records.append(line["record"])
            if len(records) >= FAULT_AT and fault_at is None:
                fault_at = len(records)
                fault.go.set()
    finally:
        watchdog.cancel()
        fault.go.set()  # never leave the thread waiting
        fault.join(START_TIMEOUT_S + 30)
        client.close()
    elapsed = time.monotonic() - started

    keys = Counter(record_key(r) for r in records)
    outcomes = Counter(r.get("outcome", "failure_record") for r in records)
    attempts = [r.get("attempts", 1) for r in records]
    attempt_errors = Counter(e["outcome"] for r in records for e in r.get("metrics", {}).get("attempt_errors", []))
    row = {
        "case": case,
        "retry_errors": retry_errors,
        "tasks": TASKS,
        "records": len(records),
        "duplicates": sum(n - 1 for n in keys.values()),
        "missing": len({r["task_id"] for r in rows} - set(keys)),
        "errors": {k: v for k, v in sorted(outcomes.items()) if k != "completed"},
        "retried_attempts": sum(a - 1 for a in attempts),
        "retried_attempt_errors": dict(sorted(attempt_errors.items())),
        "tasks_retried": sum(1 for a in attempts if a > 1),
        "reclaimed": end.get("reclaimed"),
        "fault_at_record": fault_at,
        "seconds": round(elapsed, 1),
        "state": end.get("state"),
    }
    TABLE[case] = row
    ARTIFACT.parent.mkdir(exist_ok=True)
    ARTIFACT.write_text(json.dumps({"tasks": TASKS, "model_delay_s": DELAY_S, "cases": TABLE}, indent=2) + "\n")
    print(
        f"\n{case}: tasks {TASKS} records {row['records']} duplicates {row['duplicates']} missing {row['missing']} "
        f"error records {row['errors'] or '{}'} retried attempts {row['retried_attempts']} "
        f"{row['retried_attempt_errors'] or ''} ({row['tasks_retried']} tasks) reclaimed {row['reclaimed']} "
        f"fault at record {fault_at}, finished in {elapsed:.1f}s"
    )

    assert fault.error is None, f"the fault itself failed: {fault.error!r}"
    assert fault_at is not None and fault_at < TASKS, "the job finished before the fault"
    assert end.get("state") == "done", f"the job ended {end.get('state')} (watchdog at {DEADLINE_S:g}s): {end}"
    assert row["duplicates"] == 0 and row["missing"] == 0 and len(records) == TASKS, row
    assert end["done"] == TASKS and end["counts"] == dict(outcomes), end
    if retry_errors == 0:  # the episodes the outage hit failed, and nothing re-ran them
        assert row["errors"] and row["retried_attempts"] == 0, row
    for r in records:
        assert "outcome" in r, f"a task without an episode: {r}"  # failure records are for refused rows
        if r["outcome"] == "completed":
            assert r["reward"] == 1.0, r  # an infrastructure failure scored as a reward shows here
        else:
            assert r["outcome"] in INFRA, r
            assert r["reward"] is None and r["error"]["kind"] and r["error"]["component"], r
        failed = r.get("metrics", {}).get("attempt_errors", [])
        assert len(failed) == r["attempts"] - 1 and all(e["outcome"] in INFRA for e in failed), r
    return row
