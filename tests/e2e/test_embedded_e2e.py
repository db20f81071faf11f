"""The embedded shape end to end with the real tiny model: one process, one port, rollout jobs
over several environments submitted and read by a plain HTTP client, as an external trainer would."""

from __future__ import annotations

import time
from collections import Counter, defaultdict

import httpx
import pytest

from rollgate.core import jsonutil
from rollgate.core.schemas import Trajectory
from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings
from tests.gateway.rows import example_rows

ENVS = ["math", "wordle", "game2048", "workplace"]


@pytest.fixture(scope="module")
def embedded():
    from rollgate.model_server.tiny import ensure_tiny_model
    from rollgate.stack.embedded import build_app

    settings = Settings(
        envs=ENVS,
        gateway={"ui": False},
        agent={"max_turns": 2, "max_output_tokens_per_call": 12, "max_output_tokens": 24, "concurrency": 32},
    )
    ensure_tiny_model(settings.model.model_path)  # built once per machine, then cached
    with serve_in_thread(build_app(settings), timeout_s=300) as url:
        client = httpx.Client(base_url=url, timeout=httpx.Timeout(120, connect=5))
        yield client
        client.close()


def stream_all(client: httpx.Client, job_id: str, cursor: str | None = None, stop_after: int | None = None):
    """-> (records, last cursor, end line or None). Stops early (dropping the connection) after
    `stop_after` records, like a trainer whose connection breaks."""
    records, end = [], None
    params = {"wait": "true", **({"cursor": cursor} if cursor else {})}
    with client.stream("GET", f"/v1/rollouts/{job_id}/results", params=params) as resp:
        assert resp.status_code == 200
        for raw in resp.iter_lines():
            line = jsonutil.loads(raw)
            if line["type"] == "heartbeat":
                continue
            cursor = line["cursor"]
            if line["type"] == "end":
                end = line
                break
            records.append(line["record"])
            if stop_after is not None and len(records) >= stop_after:
                break
    return records, cursor, end


def test_one_hundred_rollouts_over_four_environments_with_token_data(embedded):
    rows = [r for env in ENVS for r in example_rows(env, 13 if env in ("math", "wordle") else 12)]
    assert len(rows) == 50
    started = time.monotonic()
    resp = embedded.post(
        "/v1/rollouts", json={"tasks": rows, "repeats": 2, "policy_version": "e2e-1", "sampling": {"temperature": 1.0}}
    )
    assert resp.status_code == 201, resp.text
    job_id = resp.json()["job_id"]
    records, _, end = stream_all(embedded, job_id)
    elapsed = time.monotonic() - started
    assert end is not None and end["progress"]["done"] == 100
    trajs = [Trajectory.model_validate(r) for r in records]
    assert len(trajs) == 100
    assert Counter(t.task.env for t in trajs) == {"math": 26, "wordle": 26, "game2048": 24, "workplace": 24}
    assert len({t.trajectory_id for t in trajs}) == 100
    groups = defaultdict(list)
    for t in trajs:
        groups[t.group_id].append(t.sample_index)
        assert t.job_id == job_id and t.policy.policy_version == "e2e-1"
    assert len(groups) == 50 and all(sorted(v) == [0, 1] for v in groups.values())
    with_reward = [t for t in trajs if t.ok]
    assert len(with_reward) >= 90, Counter(t.outcome.value for t in trajs)  # infrastructure holds up
    for t in with_reward:
        assert t.turns, t.trajectory_id
        for turn in t.turns:
            assert turn.prompt_token_ids and turn.generation_token_ids
            assert len(turn.generation_log_probs) == len(turn.generation_token_ids)
            assert all(lp <= 0.0 for lp in turn.generation_log_probs)
    print(
        f"\nembedded e2e: 100 rollouts in {elapsed:.1f}s ({100 / elapsed:.2f} rollouts/s); outcomes "
        f"{dict(Counter(t.outcome.value for t in trajs))}"
    )


def test_trainer_reconnects_mid_stream_and_gets_every_record_once(embedded):
    rows = [dict(r, task_id=f"tr{i}") for i, r in enumerate(example_rows("math", 10))]
    job_id = embedded.post("/v1/rollouts", json={"tasks": rows, "env": "math", "repeats": 2}).json()["job_id"]
    seen: list[dict] = []
    first, cursor, end = stream_all(embedded, job_id, stop_after=4)  # the connection drops here
    seen += first
    assert end is None and len(first) == 4
    while end is None:
        more, cursor, end = stream_all(embedded, job_id, cursor=cursor, stop_after=5)
        seen += more
    keys = Counter((r["task"]["task_id"], r["sample_index"]) for r in seen)
    assert len(seen) == 20 and set(keys.values()) == {1}
    progress = embedded.get(f"/v1/rollouts/{job_id}").json()
    assert progress["state"] == "done" and progress["total"] == 20


def test_model_and_env_routes_share_the_one_port(embedded):
    models = embedded.get("/v1/models").json()
    assert models["data"][0]["id"]
    tools = embedded.get("/envs/wordle/tools").json()
    assert any(t["name"] == "guess" for t in tools)
    reply = embedded.post(
        "/v1/responses", json={"model": models["data"][0]["id"], "input": "Hi", "max_output_tokens": 4}
    )
    assert reply.status_code == 200 and reply.json()["output"]
    with embedded.stream(
        "POST",
        "/v1/responses",
        json={"model": models["data"][0]["id"], "input": "Hi", "max_output_tokens": 4, "stream": True},
    ) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = [x for x in resp.iter_lines() if x.startswith("event:")]
    assert events[0] == "event: response.created"
    assert events[-1] in ("event: response.completed", "event: response.incomplete")  # 4 tokens may cut it short
