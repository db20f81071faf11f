"""The distributed shape as real processes on loopback, started from rollgate.core.topology (the
same description compose.yaml uses): model server, 2 replicas of one environment, 2 agent
workers and a gateway, with the real Redis for sessions and the job queue. The model runs the
scripted backend: these tests are about delivery under failures, not about the model."""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from rollgate.core import jsonutil
from rollgate.core.schemas import Outcome, Trajectory
from rollgate.core.topology import loopback_topology
from tests.conftest import free_port
from tests.gateway.rows import example_rows
from tests.procs import ServerProcess, rollgate_cmd

TOKEN = "dist-" + uuid.uuid4().hex[:8]


def math_rows(n: int) -> list[dict]:
    base = example_rows("math", 100)
    return [dict(base[i % len(base)], task_id=f"d{i}") for i in range(n)]


@pytest.fixture(scope="module")
def cluster(redis_url, tmp_path_factory):
    logs = tmp_path_factory.mktemp("dist-logs")
    ports: dict[tuple[str, int], int] = {}
    specs = loopback_topology(
        ["math"],
        redis_url=redis_url,
        api_key=TOKEN,
        agent_replicas=2,
        env_replicas=2,
        model_backend="scripted",
        agent_concurrency=4,
        port_of=lambda name, i: ports.setdefault((name, i), free_port()),
    )
    prefix = f"rgtest:{uuid.uuid4().hex[:12]}:q"
    extra = {
        "ROLLGATE_GATEWAY__QUEUE_PREFIX": prefix,
        # A dead worker's tasks move on quickly; live workers heart-beat every third of this.
        "ROLLGATE_GATEWAY__VISIBILITY_TIMEOUT_S": "3",
        # Tight budgets so a dead model server ends episodes quickly.
        "ROLLGATE_AGENT__MODEL_TIMEOUT_S": "3",
        "ROLLGATE_AGENT__EPISODE_TIMEOUT_S": "15",
        "ROLLGATE_AGENT__RETRIES": "2",
        "ROLLGATE_GATEWAY__UI": "false",
    }
    procs = {
        spec.name: [
            ServerProcess(
                rollgate_cmd(*spec.command(i)),
                spec.replica_ports[i],
                env={**spec.env, **extra},
                log_path=logs / f"{spec.name}-{i}.log",
            )
            for i in range(spec.replicas)
        ]
        for spec in specs
    }
    try:
        # No part contacts another while starting, so all start at once (imports dominate).
        with ThreadPoolExecutor(max_workers=8) as pool:
            for fut in [pool.submit(p.start, 120) for group in procs.values() for p in group]:
                fut.result()
        gateway = procs["gateway"][0]
        client = httpx.Client(base_url=gateway.url, headers={"authorization": f"Bearer {TOKEN}"}, timeout=30)
        yield {"procs": procs, "specs": {s.name: s for s in specs}, "client": client, "extra": extra, "logs": logs}
        client.close()
    finally:
        for group in procs.values():
            for p in group:
                p.kill()
        import redis

        r = redis.Redis.from_url(redis_url)
        for key in r.scan_iter(match=f"{prefix}:*", count=500):
            r.delete(key)


def run_job(client: httpx.Client, rows: list[dict], *, timeout_s: float = 90, on_record=None) -> tuple[list, dict]:
    job = client.post("/v1/rollouts", json={"tasks": rows, "env": "math", "policy_version": "dist"})
    assert job.status_code == 201, job.text
    job_id = job.json()["job_id"]
    records, cursor = [], None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        params = {"wait": "true", **({"cursor": cursor} if cursor else {})}
        with client.stream(
            "GET", f"/v1/rollouts/{job_id}/results", params=params, timeout=httpx.Timeout(timeout_s, connect=5)
        ) as resp:
            for raw in resp.iter_lines():
                line = jsonutil.loads(raw)
                cursor = line["cursor"]
                if line["type"] == "end":
                    return records, line["progress"]
                if line["type"] in ("trajectory", "failure"):
                    records.append(line["record"])
                    if on_record:
                        on_record(records)
    pytest.fail(f"job {job_id} did not finish within {timeout_s}s: {client.get(f'/v1/rollouts/{job_id}').json()}")


def test_killed_agent_worker_loses_no_task_and_duplicates_none(cluster):
    client = cluster["client"]
    victim = cluster["procs"]["agent"][0]
    rows = math_rows(60)
    killed = []

    def kill_once(records):
        if len(records) >= 5 and not killed:
            victim.kill(signal.SIGKILL)  # mid-job: it holds claimed, unfinished tasks
            killed.append(time.monotonic())

    started = time.monotonic()
    records, progress = run_job(client, rows, on_record=kill_once)
    elapsed = time.monotonic() - started
    assert killed, "the job finished before a worker could be killed"
    keys = Counter((r["task"]["task_id"], r["sample_index"]) for r in records)
    assert len(records) == 60 and set(keys.values()) == {1}
    assert {k[0] for k in keys} == {r["task_id"] for r in rows}
    trajs = [Trajectory.model_validate(r) for r in records]
    assert all(t.policy.policy_version == "dist" and t.job_id for t in trajs)
    assert progress["done"] == 60 and progress["state"] == "done"
    print(
        f"\ndistributed: 60 rollouts in {elapsed:.1f}s ({60 / elapsed:.1f} rollouts/s) with one worker "
        f"SIGKILLed; {progress['reclaimed']} tasks reclaimed; outcomes {dict(progress['counts'])}"
    )


def test_dead_model_server_ends_episodes_in_budget_and_recovery_works(cluster):
    client = cluster["client"]
    model = cluster["procs"]["model"][0]
    model.kill(signal.SIGKILL)
    started = time.monotonic()
    records, progress = run_job(client, math_rows(6), timeout_s=60)
    elapsed = time.monotonic() - started
    assert len(records) == 6
    outcomes = {r["outcome"] for r in records}
    assert outcomes <= {Outcome.model_error.value, Outcome.timeout.value}, outcomes
    assert all(r["reward"] is None and r["error"]["component"] in ("model", "agent") for r in records)
    assert elapsed < 30, f"episodes against a dead model server took {elapsed:.1f}s"

    model.start(timeout_s=120)  # same port: the workers' clients reconnect
    records, progress = run_job(client, math_rows(6), timeout_s=60)
    assert {r["outcome"] for r in records} <= {Outcome.completed.value, Outcome.truncated.value}
    assert all(r["reward"] is not None for r in records)


def test_gateway_proxies_model_and_env_replicas(cluster):
    client = cluster["client"]
    models = client.get("/v1/models")
    assert models.status_code == 200 and models.json()["data"]
    request = {"model": models.json()["data"][0]["id"], "input": "Say hi", "max_output_tokens": 8}
    reply = client.post("/v1/responses", json=request)
    assert reply.status_code == 200 and reply.json()["output"]
    with client.stream("POST", "/v1/responses", json={**request, "stream": True}) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = [x for x in resp.iter_lines() if x.startswith("event:")]
    assert events[0] == "event: response.created" and events[-1].startswith("event: response.")
    assert client.post("/v1/responses", json={"input": 5}).status_code == 400  # the model's own 4xx passes through
    tools = client.get("/envs/math/tools")
    assert tools.status_code == 200 and {t["name"] for t in tools.json()} >= {"calculator"}
    # a session seeded through one replica is usable through the other (shared Redis)
    seeded = client.post("/envs/math/sessions", json=math_rows(1)[0]).json()
    for _ in range(2):  # round robin: the two calls reach both replicas
        out = client.post(
            f"/envs/math/sessions/{seeded['session_id']}/tools/calculator", json={"arguments": {"expression": "6*7"}}
        )
        assert out.status_code == 200 and "42" in out.json()["output"]
    assert client.get("/envs/chess/tools").status_code == 404
    assert httpx.get(str(client.base_url) + "/v1/rollouts").status_code == 401


def test_agent_server_runs_one_episode_per_request(cluster):
    agent = cluster["procs"]["agent"][1]  # replica 0 was killed above
    auth = {"authorization": f"Bearer {TOKEN}"}
    row = math_rows(1)[0]
    assert httpx.post(agent.url + "/run", json=row).status_code == 401
    resp = httpx.post(agent.url + "/run", json=row, headers=auth, timeout=30)
    assert resp.status_code == 200, resp.text
    traj = Trajectory.model_validate(resp.json())
    assert traj.task.env == "math" and traj.task.task_id == row["task_id"] and traj.ok
    bad = httpx.post(agent.url + "/run", json={"responses_create_params": {}}, headers=auth, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "responses_create_params"
