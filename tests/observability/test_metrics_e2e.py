"""After a real job on the embedded gateway, /metrics agrees with the job's own records, and the
viewer (in a real Chromium) shows those records.

The policy is the scripted model backend with the tiny model's tokenizer: real prompts, real
token ids, and a known number of tool calls per episode (the first tool, then "done"), so every
counter has an exact expected value. One row carries a malformed script, which the model
server refuses: that episode must be counted as a model_error."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rollgate.core import jsonutil
from rollgate.core.schemas import Trajectory
from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings

REPO = Path(__file__).resolve().parents[2]
ENVS = ["math", "workplace"]


def rows_of(env: str, n: int) -> list[dict]:
    lines = [x for x in (REPO / "examples" / f"{env}.jsonl").read_bytes().splitlines() if x.strip()]
    return [jsonutil.loads(x) for x in lines[:n]]


def scrape(client: httpx.Client) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value."""
    text = client.get("/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def series(samples, name: str, **match: str) -> dict[tuple, float]:
    """Samples of `name` whose labels include `match`, keyed by their remaining labels."""
    out = {}
    for (n, labels), value in samples.items():
        d = dict(labels)
        if n == name and all(d.get(k) == v for k, v in match.items()):
            out[tuple(v for k, v in labels if k not in match)] = value
    return out


@pytest.fixture(scope="module")
def job():
    """Run one job on a fresh embedded gateway; yield (client, job_id, trajectories, metric samples)."""
    from rollgate.model_server.tiny import ensure_tiny_model
    from rollgate.stack.embedded import build_app

    tiny = Settings().model.model_path
    ensure_tiny_model(tiny)  # built once per machine, then cached (the other e2e tests share it)
    settings = Settings(
        envs=ENVS, model={"backend": "scripted", "model_path": tiny}, agent={"max_turns": 3, "concurrency": 8}
    )
    broken = rows_of("math", 1)[0]
    broken = {
        **broken,
        "task_id": "broken-script",
        "responses_create_params": {
            **broken["responses_create_params"],
            "metadata": {"rollgate_script": "not a script"},
        },
    }
    rows = [*rows_of("math", 3), *rows_of("workplace", 2), broken]
    with serve_in_thread(build_app(settings), timeout_s=120) as url:
        client = httpx.Client(base_url=url, timeout=60)
        resp = client.post("/v1/rollouts", json={"tasks": rows, "repeats": 2, "policy_version": "obs-1"})
        assert resp.status_code == 201, resp.text
        job_id = resp.json()["job_id"]
        records = []
        with client.stream("GET", f"/v1/rollouts/{job_id}/results", params={"wait": "true"}) as r:
            for raw in r.iter_lines():
                line = jsonutil.loads(raw)
                if line["type"] == "end":
                    break
                if line["type"] != "heartbeat":
                    records.append(line["record"])
        # the queue-depth gauge is refreshed by a background loop (every 2 s)
        deadline = time.monotonic() + 10
        while (samples := scrape(client))[("rollgate_queue_depth", ())] != 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        yield client, job_id, [Trajectory.model_validate(r) for r in records], samples, url
        client.close()


def test_every_task_became_one_trajectory(job):
    _, _, trajs, _, _ = job
    assert len(trajs) == 12
    assert Counter(t.outcome.value for t in trajs if t.task.task_id == "broken-script") == {"model_error": 2}


def test_rollouts_finished_by_env_and_outcome_equal_the_jobs_records(job):
    _, _, trajs, samples, _ = job
    expected = Counter((t.task.env, t.outcome.value) for t in trajs)
    got = {k: v for k, v in series(samples, "rollgate_rollouts_finished_total").items() if v}
    assert got == {k: float(v) for k, v in expected.items()}
    started = series(samples, "rollgate_rollouts_started_total")
    assert started == {(env,): float(n) for env, n in Counter(t.task.env for t in trajs).items()}
    assert all(v == 0 for v in series(samples, "rollgate_sessions_in_flight").values())


def test_token_counters_equal_the_token_ids_in_the_trajectories(job):
    _, _, trajs, samples, _ = job
    for env in ENVS:
        mine = [t for t in trajs if t.task.env == env]
        out = sum(len(turn.generation_token_ids) for t in mine for turn in t.turns)
        prompt = sum(len(turn.prompt_token_ids) for t in mine for turn in t.turns)
        assert out > 0
        assert series(samples, "rollgate_tokens_total", env=env) == {("in",): prompt, ("out",): out}
    model_out = series(samples, "rollgate_model_tokens_total", direction="out")
    assert model_out == {(): sum(len(turn.generation_token_ids) for t in trajs for turn in t.turns)}


def test_model_calls_and_hops_match_the_turns(job):
    _, _, trajs, samples, _ = job
    turns = sum(len(t.turns) for t in trajs)
    requests = series(samples, "rollgate_model_requests_total", backend="scripted")
    assert requests[("ok",)] == turns
    assert requests[("bad_request",)] == 2  # the two samples of the broken script
    for env in ENVS:
        mine = [t for t in trajs if t.task.env == env]
        hops = series(samples, "rollgate_hop_latency_seconds_count", env=env)
        assert hops[("model",)] == sum(len(t.turns) for t in mine)
        assert hops[("tool",)] == sum(t.metrics.get("tool_calls", 0) for t in mine)
        verified = [t for t in mine if t.reward is not None]
        assert series(samples, "rollgate_reward_count", env=env) == {(): len(verified)}
        assert series(samples, "rollgate_reward_sum", env=env)[()] == pytest.approx(sum(t.reward for t in verified))


def test_job_and_queue_gauges_settle(job):
    _, _, _, samples, _ = job
    assert series(samples, "rollgate_jobs_total", event="submitted") == {(): 1.0}
    assert samples[("rollgate_queue_depth", ())] == 0


def test_tool_call_counter_equals_the_tool_calls_in_the_trajectories(job):
    _, _, trajs, samples, _ = job
    for env in ENVS:
        calls = sum(t.metrics.get("tool_calls", 0) for t in trajs if t.task.env == env)
        assert calls > 0
        assert sum(series(samples, "rollgate_tool_calls_total", env=env).values()) == calls


def test_the_viewer_on_the_real_gateway_lists_and_opens_the_jobs_trajectories(job, browser):
    _, job_id, trajs, _, url = job
    browser.goto("about:blank")
    browser.goto(f"{url}/ui#job={job_id}")
    browser.wait_for("!!document.body && document.body.dataset.state === 'ready'")
    shown = browser.eval("[...document.querySelectorAll('#trajectories tbody tr')].map(r => r.dataset.traj)")
    assert sorted(shown) == sorted(t.trajectory_id for t in trajs)
    pick = next(t for t in trajs if t.task.env == "math" and t.metrics.get("tool_calls"))
    call = next(m for m in pick.messages if m.get("type") == "function_call")
    browser.eval(f"document.querySelector('tr[data-traj=\"{pick.trajectory_id}\"]').click()")
    browser.wait_for("!!document.querySelector('#detail-reward')")
    detail = browser.eval("document.querySelector('#detail-pane').innerText")
    assert pick.trajectory_id in detail and call["name"] in detail and "obs-1" in detail
    turns = browser.eval("[...document.querySelectorAll('table.turns tbody tr')].map(r => r.cells[2].textContent)")
    assert turns == [str(len(turn.generation_token_ids)) for turn in pick.turns]
    browser.screenshot("viewer-real-gateway.png")
    browser.goto(f"{url}/ui#job={job_id}&outcome=model_error")
    browser.wait_for("document.querySelectorAll('#trajectories tbody tr').length === 2")
