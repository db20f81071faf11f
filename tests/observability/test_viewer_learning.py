"""The viewer's learning plots in a real headless Chromium, against the REAL gateway (its
/v1/rollouts, /summary and /report routes over HTTP on loopback, the memory job queue). The test
is the worker: it completes every task with a Trajectory whose reward it chooses, so each point
of the curve, each histogram bar and each outcome segment is known by construction."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from rollgate.core.serving import serve_in_thread
from rollgate.jobs.memory import MemoryJobQueue
from tests.gateway.serving import gateway_app, work

SEGMENTS = (
    "[...document.querySelectorAll('#outcomes rect.seg')]"
    ".map(s => [s.dataset.env, s.dataset.outcome, +s.dataset.count])"
)
READY = "!!document.body && document.body.dataset.state === 'ready'"
VERSIONS = ["step-0", "step-1", "step-2", "step-3"]
ROW = {"responses_create_params": {"input": "What is 2+2?"}, "expected_answer": "4"}
FAIL = None


def rows(envs: list[str]) -> list[dict]:
    return [{**ROW, "task_id": f"t{i}", "env": env} for i, env in enumerate(envs)]


def points(series: str) -> str:
    return (
        f"[...document.querySelectorAll('#curve .pt[data-series=\"{series}\"]')].map(p => [p.dataset.x, +p.dataset.y])"
    )


@pytest.fixture(scope="module")
def learning_gateway():
    """Four policy versions, each with a training job (reward i/4 per sample) and an evaluation
    job (3 tasks x k=4; task r's sample s is right when s <= i + r - 1, so the tasks differ and
    the intervals have width: pass@1 = 1/4, 1/2, 3/4, 11/12), one failed sample in
    step-1's training job, and one evaluation job still running."""
    queue = MemoryJobQueue()
    app = gateway_app(queue)

    async def remember_loop() -> None:
        app.state.loop = asyncio.get_running_loop()

    app.router.on_startup.insert(0, remember_loop)
    jobs: dict[str, str] = {}
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as client:

        def run(coro):
            return asyncio.run_coroutine_threadsafe(coro, app.state.loop).result(30)

        for i, v in enumerate(VERSIONS):
            train = client.post(
                "/v1/rollouts", json={"tasks": rows(["math", "workplace"]), "repeats": 4, "policy_version": v}
            )
            assert train.status_code == 201, train.text
            rewards = {r: [1.0 if s < i else 0.0 for s in range(4)] for r in range(2)}
            if i == 1:
                rewards[1][3] = FAIL
            run(work(queue, rewards))
            ev = client.post(
                "/v1/rollouts", json={"tasks": rows(["math"] * 3), "purpose": "eval", "k": 4, "policy_version": v}
            )
            assert ev.status_code == 201, ev.text
            run(work(queue, {r: [1.0 if s <= i + r - 1 else 0.0 for s in range(4)] for r in range(3)}))
            jobs[f"train-{v}"], jobs[f"eval-{v}"] = train.json()["job_id"], ev.json()["job_id"]
        running = client.post(
            "/v1/rollouts", json={"tasks": rows(["math"]), "purpose": "eval", "policy_version": "step-4"}
        )
        jobs["running"] = running.json()["job_id"]
        summary = client.get("/v1/rollouts/summary").json()
        yield url, jobs, summary


def open_view(browser, url: str, hash_: str) -> None:
    browser.goto("about:blank")
    browser.goto(f"{url}/ui{hash_}")
    browser.wait_for(READY)


def test_learning_view_plots_train_reward_and_evaluations_per_policy_version(browser, learning_gateway):
    url, jobs, summary = learning_gateway
    open_view(browser, url, "#view=learning")
    assert browser.eval("document.body.dataset.view") == "learning"
    train = browser.eval(points("train mean reward"))
    assert train == [["step-0", 0], ["step-1", pytest.approx(2 / 7)], ["step-2", 0.5], ["step-3", 0.75]]
    # step-1: 8 samples, one failed and left out: 2 of the 7 rewarded records are right
    assert train[1][1] == pytest.approx(summary["versions"][1]["train"]["mean_reward"])
    expected = [[v, pytest.approx(x)] for v, x in zip(VERSIONS, [1 / 4, 1 / 2, 3 / 4, 11 / 12], strict=True)]
    assert browser.eval(points("eval pass@1")) == expected
    assert browser.eval(points("eval mean reward")) == expected
    bars = browser.eval("document.querySelectorAll('#curve .series.s-pass line.ci').length")
    assert bars == 3 * 4  # every evaluation point has its interval (a bar and two caps)
    table = browser.eval(
        "[...document.querySelectorAll('#versions tbody tr')].map(r => [...r.cells].map(c => c.textContent))"
    )
    assert [r[0] for r in table] == VERSIONS
    assert table[3][3] == jobs["eval-step-3"] and table[3][5].startswith("0.917 [")
    assert table[0][6] == "@4 " + "0.667 [0, 1]"  # step-0: task 0 never right, so pass@4 = 2/3
    assert table[0][7] == "0/12"
    summary_line = browser.eval("document.querySelector('#learning-summary').textContent")
    assert "8 finished jobs over 4 policy versions" in summary_line and "1 running" in summary_line
    # Offline: every resource the page loaded came from the gateway itself (no CDN).
    assert browser.eval("performance.getEntriesByType('resource').every(e => e.name.startsWith(location.origin))")
    shot = browser.screenshot("viewer-learning.png")
    assert shot.stat().st_size > 20_000


def test_job_overview_shows_reward_histogram_outcomes_per_env_and_the_eval_report(browser, learning_gateway):
    url, jobs, _ = learning_gateway
    open_view(browser, url, "#view=learning")
    browser.eval(f"document.querySelector('#versions a[href=\"#job={jobs['eval-step-2']}\"]').click()")
    browser.wait_for(f"{READY} && document.body.dataset.view === 'jobs' && !!document.querySelector('#report table')")
    bars = browser.eval("[...document.querySelectorAll('#hist rect.bar')].map(b => +b.dataset.count)")
    assert len(bars) == 10 and bars[0] == 3 and bars[-1] == 9 and sum(bars) == 12
    segs = browser.eval(SEGMENTS)
    assert segs == [["math", "completed", 12]]
    report = browser.eval(
        "Object.fromEntries([...document.querySelectorAll('#report tbody tr')].map(r => [r.dataset.env, "
        "[...r.cells].map(c => c.textContent)]))"
    )
    assert report["overall"][:4] == ["overall", "3", "12", "0"]
    value, lo, hi = (float(x) for x in report["overall"][5].replace("[", "").replace("]", "").replace(",", "").split())
    assert value == 0.75 and lo < value < hi  # pass@1: tasks 2, 3 and 4 of 4 right
    assert report["overall"][6].startswith("1 [1, 1]")  # pass@4
    assert "policy version step-2" in browser.eval("document.querySelector('#report').innerText")
    browser.screenshot("viewer-job-charts.png")
    browser.eval("document.querySelector('#report').scrollIntoView()")
    browser.screenshot("viewer-eval-report.png")


def test_job_overview_splits_outcomes_by_environment(browser, learning_gateway):
    url, jobs, _ = learning_gateway
    open_view(browser, url, f"#job={jobs['train-step-1']}")
    browser.wait_for("!!document.querySelector('#outcomes rect.seg')")
    segs = browser.eval(SEGMENTS)
    assert segs == [["math", "completed", 4], ["workplace", "completed", 3], ["workplace", "model_error", 1]]
    bars = browser.eval("[...document.querySelectorAll('#hist rect.bar')].map(b => +b.dataset.count)")
    assert (bars[0], bars[-1], sum(bars)) == (5, 2, 7)  # the failed sample has no reward: not in the histogram
    assert browser.eval("document.querySelector('#report')") is None  # a training job has no report
    browser.screenshot("viewer-job-outcomes.png")


def test_a_running_eval_job_says_its_report_comes_when_it_ends(browser, learning_gateway):
    url, jobs, _ = learning_gateway
    open_view(browser, url, f"#job={jobs['running']}")
    browser.wait_for("!!document.querySelector('#report')")
    assert "still running" in browser.eval("document.querySelector('#report').textContent")
    assert browser.eval("document.querySelector('#hist').textContent") == "no record with a reward yet"
