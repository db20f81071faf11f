"""report.html in a real headless Chromium (tests/observability/browser.py), opened from a
file:// URL with no server behind it: the per-environment table and the pass@k plot render,
the page asks for nothing over the network, and a screenshot is kept in test-artifacts/."""

from __future__ import annotations

import pytest

from rollgate.core.eval_metrics import MetricConfig
from rollgate.core.schemas import ErrorInfo, ErrorKind, Outcome
from rollgate.evaluation.html import write_html
from rollgate.evaluation.report import build_report
from rollgate.evaluation.samples import Sample
from tests.observability.browser import Browser, find_chromium


@pytest.fixture(scope="module")
def browser():
    exe = find_chromium()
    if exe is None:
        pytest.skip("no Chromium on this machine (Debian: apt-get install -y chromium)")
    b = Browser(exe).start()
    try:
        yield b
    finally:
        b.close()


def synthetic_samples() -> list[Sample]:
    """math: task i right on i of 4 samples; wordle: alternating; one wordle sample failed."""
    out = []
    for i in range(5):
        for j in range(4):
            right = j < i
            out.append(
                Sample(env="math", task_id=f"m{i}", sample_index=j, content_hash=f"m{i}", outcome=Outcome.completed,
                       reward=1.0 if right else 0.0, answer=str(i) if right else "x",
                       tags={"category": "easy" if i > 2 else "hard"}, model="tiny", policy_version="v3")
            )  # fmt: skip
    for i in range(4):
        for j in range(4):
            if i == 0 and j == 0:
                error = ErrorInfo(kind=ErrorKind.timeout, component="agent", message="episode exceeded 300s")
                out.append(Sample(env="wordle", task_id="w0", sample_index=0, content_hash="w0",
                                  outcome=Outcome.timeout, error=error, model="tiny", policy_version="v3"))  # fmt: skip
                continue
            out.append(
                Sample(env="wordle", task_id=f"w{i}", sample_index=j, content_hash=f"w{i}", outcome=Outcome.completed,
                       reward=1.0 if (i + j) % 2 else 0.4, model="tiny", policy_version="v3")
            )  # fmt: skip
    return out


def test_report_page_renders_offline_with_table_and_pass_at_k_plot(browser, tmp_path):
    report = build_report(synthetic_samples(), MetricConfig(k=4, pass_k=(1, 2, 4)), envs=["math", "wordle"])
    report["failure_check"] = {"failure_fraction": 1 / 36, "max_failure_fraction": 0.1, "passed": True}
    path = tmp_path / "report.html"
    write_html(report, path)

    browser.goto("about:blank")
    browser.goto(path.as_uri())
    browser.wait_for("!!document.body && document.body.dataset.state === 'ready'")
    rows = browser.eval("[...document.querySelectorAll('#envs tbody tr')].map(r => r.dataset.env)")
    assert rows == ["math", "wordle", "overall"]
    math_cells = browser.eval("[...document.querySelectorAll('#envs tr[data-env=math] td')].map(c => c.textContent)")
    # math pass@1 = mean(i/4 for i in 0..4) = 0.5; pass@4 = 4 of 5 tasks have a right sample = 0.8
    assert math_cells[:5] == ["math", "5", "20", "0", "0"]
    assert math_cells[6].startswith("0.500 [") and math_cells[8].startswith("0.800 [")
    wordle_failed = browser.eval("document.querySelector('#envs tr[data-env=wordle] td:nth-child(4)').title")
    assert wordle_failed == "timeout 1"
    series = browser.eval("[...document.querySelectorAll('#passk-plot polyline.series')].map(p => p.dataset.env)")
    assert series == ["math", "wordle", "overall"]
    box = browser.eval("(() => { const r = document.querySelector('#passk-plot').getBoundingClientRect(); "
                       "return [r.width, r.height]; })()")  # fmt: skip
    assert box == [640, 340]
    # Offline: the page loaded no resource at all, and references none over the network.
    assert browser.eval("performance.getEntriesByType('resource').length") == 0
    assert (
        browser.eval(
            "[...document.querySelectorAll('[src],[href]')].filter(e => /^https?:/.test(e.src || e.href)).length"
        )
        == 0
    )
    tags = browser.eval("[...document.querySelectorAll('table.tags td:first-child')].map(c => c.textContent)")
    assert tags == ["easy", "hard"]
    shot = browser.screenshot("eval-report.png")
    assert shot.stat().st_size > 10_000
