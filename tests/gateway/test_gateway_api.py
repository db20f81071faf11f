"""The gateway's rollout API over real HTTP on loopback: validation, auth, capacity, and the
resumable results stream. Tasks are completed through the real queue by the test itself acting
as the worker, so these tests need no model."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from rollgate.core import jsonutil
from rollgate.core.metrics import Metrics
from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings
from rollgate.gateway.server import create_gateway_app
from rollgate.jobs.memory import MemoryJobQueue

TOKEN = "s3cret-token"
ROW = {"responses_create_params": {"input": "What is 2+2?"}, "expected_answer": "4"}


def make_gateway(*, api_key: str | None = TOKEN, max_queued_tasks: int = 1000):
    settings = Settings(gateway={"max_queued_tasks": max_queued_tasks, "ui": False})
    queue = MemoryJobQueue(max_queued_tasks=max_queued_tasks)
    app = create_gateway_app(
        settings, queue, known_envs=lambda: ["math", "wordle"], routers=[], metrics=Metrics(), api_key=api_key
    )

    async def remember_loop() -> None:  # so tests can run queue calls in the serving thread's loop
        app.state.loop = asyncio.get_running_loop()

    app.router.on_startup.insert(0, remember_loop)
    return app, queue


@pytest.fixture
def gateway():
    app, queue = make_gateway()
    with serve_in_thread(app) as url:
        client = httpx.Client(base_url=url, headers={"authorization": f"Bearer {TOKEN}"}, timeout=10)
        yield client, queue, app
        client.close()


def finish(app, queue: MemoryJobQueue, n: int, *, reward: float = 1.0) -> None:
    """Act as a worker in the server's own event loop: claim n tasks and complete them."""

    async def work():
        claims = await queue.claim("test-worker", n, block_s=0.5)
        for c in claims:
            await queue.complete(
                c,
                {
                    "trajectory_id": f"traj-{c.task.key}",
                    "outcome": "completed",
                    "reward": reward,
                    "task": {"task_id": c.task.task_id, "env": c.task.env},
                    "policy": {"policy_version": c.task.policy_version},
                },
            )
        return len(claims)

    loop = app.state.loop
    assert asyncio.run_coroutine_threadsafe(work(), loop).result(10) == n


def submit(client, **body) -> httpx.Response:
    return client.post("/v1/rollouts", json={"tasks": [ROW], "env": "math", **body})


def error_of(resp: httpx.Response) -> dict:
    return resp.json()["error"]


def test_job_is_accepted_and_reports_progress(gateway):
    client, queue, app = gateway
    resp = submit(client, tasks=[ROW, ROW, ROW], repeats=2, policy_version="step-12")
    assert resp.status_code == 201, resp.text
    job = resp.json()
    assert job["num_tasks"] == 6 and job["num_rows"] == 3
    finish(app, queue, 4, reward=0.5)
    prog = client.get(f"/v1/rollouts/{job['job_id']}").json()
    assert (prog["state"], prog["done"], prog["total"]) == ("running", 4, 6)
    assert prog["counts"] == {"completed": 4} and prog["mean_reward"] == 0.5
    assert prog["policy_version"] == "step-12"
    assert job["job_id"] in [j["job_id"] for j in client.get("/v1/rollouts").json()["jobs"]]


def test_results_stream_resumes_from_a_cursor_without_loss_or_repeat(gateway):
    client, queue, app = gateway
    job_id = submit(client, tasks=[ROW] * 5).json()["job_id"]
    finish(app, queue, 3)
    lines = [jsonutil.loads(x) for x in client.get(f"/v1/rollouts/{job_id}/results").text.splitlines()]
    assert [x["type"] for x in lines] == ["trajectory"] * 3  # job still running: no end line
    first_two = lines[:2]
    finish(app, queue, 2)
    again = client.get(f"/v1/rollouts/{job_id}/results", params={"cursor": first_two[-1]["cursor"]})
    resumed = [jsonutil.loads(x) for x in again.text.splitlines()]
    assert [x["type"] for x in resumed] == ["trajectory"] * 3 + ["end"]
    ids = [x["record"]["trajectory_id"] for x in first_two + resumed[:-1]]
    assert len(ids) == 5 and len(set(ids)) == 5
    assert resumed[-1]["progress"]["state"] == "done"


def test_waiting_stream_delivers_records_as_they_land_then_ends(gateway):
    client, queue, app = gateway
    job_id = submit(client, tasks=[ROW] * 2).json()["job_id"]
    got = []
    with client.stream("GET", f"/v1/rollouts/{job_id}/results", params={"wait": "true"}) as resp:
        assert resp.headers["content-type"].startswith("application/x-ndjson")
        finish(app, queue, 1)
        for raw in resp.iter_lines():
            line = jsonutil.loads(raw)
            got.append(line["type"])
            if len(got) == 1:
                finish(app, queue, 1)
    assert got == ["trajectory", "trajectory", "end"]


def test_cancel_answers_with_every_task_accounted_for(gateway):
    client, queue, app = gateway
    job_id = submit(client, tasks=[ROW] * 4).json()["job_id"]
    finish(app, queue, 1)
    prog = client.delete(f"/v1/rollouts/{job_id}").json()
    assert prog["state"] == "cancelled" and prog["counts"] == {"completed": 1, "cancelled": 3}
    lines = [jsonutil.loads(x) for x in client.get(f"/v1/rollouts/{job_id}/results").text.splitlines()]
    assert [x["type"] for x in lines].count("trajectory") == 4 and lines[-1]["type"] == "end"


@pytest.mark.parametrize(
    "body, status, field, words",
    [
        ({"tasks": []}, 400, "tasks", "at least one"),
        ({"tasks": [ROW], "env": "chess"}, 400, "env", "unknown environment 'chess'"),
        ({"tasks": [ROW, {**ROW, "env": "chess"}], "env": "math"}, 400, "tasks[1].env", "unknown environment"),
        (
            {"tasks": [ROW, ROW, {"responses_create_params": {}}], "env": "math"},
            400,
            "tasks[2].responses_create_params",
            "input is required",
        ),
        ({"tasks": [ROW, "not a row"], "env": "math"}, 400, "tasks[1]", "JSON object"),
        ({"tasks": [ROW]}, 400, "tasks[0].env", "names no environment"),
        ({"tasks": [ROW], "env": "math", "repeats": 0}, 400, "repeats", "greater than or equal to 1"),
        ({"tasks": [ROW], "env": "math", "sampling": {"temprature": 1}}, 400, "sampling.temprature", "Extra"),
        ({"tasks": [ROW], "env": "math", "agent": "swe"}, 400, "agent", "unknown agent 'swe'; known: "),
        ({"task": [ROW]}, 400, "tasks", "required"),
    ],
)
def test_bad_job_requests_name_the_field(gateway, body, status, field, words):
    client, _, _ = gateway
    resp = client.post("/v1/rollouts", json=body)
    assert resp.status_code == status, resp.text
    err = error_of(resp)
    assert err["field"] == field and words in err["message"]


def test_malformed_json_body_is_a_400(gateway):
    client, _, _ = gateway
    resp = client.post("/v1/rollouts", content=b"{not json", headers={"content-type": "application/json"})
    assert resp.status_code == 400 and error_of(resp)["field"] == "body"


def test_unknown_job_is_404_and_foreign_or_bad_cursor_is_400(gateway):
    client, queue, app = gateway
    assert client.get("/v1/rollouts/job_nope").status_code == 404
    assert error_of(client.get("/v1/rollouts/job_nope/results"))["field"] == "job_id"
    a = submit(client).json()["job_id"]
    b = submit(client).json()["job_id"]
    finish(app, queue, 2)
    cursor_a = jsonutil.loads(client.get(f"/v1/rollouts/{a}/results").text.splitlines()[0])["cursor"]
    resp = client.get(f"/v1/rollouts/{b}/results", params={"cursor": cursor_a})
    assert resp.status_code == 400 and error_of(resp)["field"] == "cursor"
    assert "belongs to job" in error_of(resp)["message"]
    for bad in ("garbage", f"{b}:x", f"{b}:99"):
        resp = client.get(f"/v1/rollouts/{b}/results", params={"cursor": bad})
        assert resp.status_code == 400 and error_of(resp)["field"] == "cursor", bad


def test_missing_or_wrong_token_is_401_and_healthz_stays_open(gateway):
    client, _, _ = gateway
    bare = httpx.Client(base_url=str(client.base_url), timeout=5)
    resp = bare.post("/v1/rollouts", json={"tasks": [ROW], "env": "math"})
    assert resp.status_code == 401 and "missing bearer token" in error_of(resp)["message"]
    assert resp.headers["www-authenticate"] == "Bearer"
    resp = bare.get("/v1/rollouts", headers={"authorization": "Bearer wrong"})
    assert resp.status_code == 401 and error_of(resp)["message"] == "wrong bearer token"
    assert bare.get("/healthz").status_code == 200
    bare.close()


def test_full_queue_answers_503_with_retry_after():
    app, queue = make_gateway(max_queued_tasks=3)
    with serve_in_thread(app) as url:
        client = httpx.Client(base_url=url, headers={"authorization": f"Bearer {TOKEN}"}, timeout=5)
        assert submit(client, tasks=[ROW, ROW]).status_code == 201
        resp = submit(client, tasks=[ROW, ROW])
        assert resp.status_code == 503 and int(resp.headers["retry-after"]) >= 1
        assert error_of(resp)["kind"] == "capacity"
        client.close()


def test_gateway_role_refuses_to_start_without_a_token_unless_disabled(redis_url):
    from rollgate.gateway.server import build_app

    with pytest.raises(SystemExit) as exc:
        build_app(Settings(redis_url=redis_url))
    assert "ROLLGATE_API_KEY" in str(exc.value)
    build_app(Settings(redis_url=redis_url, gateway={"auth": False}))  # explicitly open: starts
