"""The trajectory viewer in a real headless Chromium, served over real HTTP on loopback. The job
API behind it is the stand-in of standin.py (see its docstring); the real gateway is exercised in
test_metrics_e2e.py."""

from __future__ import annotations

import json

import pytest

from rollgate.core.serving import serve_in_thread
from tests.observability.standin import HOSTILE, JOB, OTHER_JOB, ROLES_JOB, standin_gateway

ROWS = "[...document.querySelectorAll('#trajectories tbody tr')].map(r => r.dataset.traj)"
READY = "!!document.body && document.body.dataset.state === 'ready'"


def open_view(browser, url: str, hash_: str = "") -> None:
    # about:blank first: a fresh document per view, so no state leaks between steps
    browser.goto("about:blank")
    browser.goto(f"{url}/ui{hash_}")
    browser.wait_for(READY)


@pytest.fixture(scope="module")
def viewer_url():
    with serve_in_thread(standin_gateway()) as url:
        yield url


def test_viewer_lists_jobs_and_the_trajectories_of_the_chosen_job(browser, viewer_url):
    open_view(browser, viewer_url)
    jobs = browser.eval("[...document.querySelectorAll('#jobs tbody tr')].map(r => r.dataset.job)")
    assert jobs == [JOB, OTHER_JOB, ROLES_JOB]
    browser.eval(f"document.querySelector('#jobs tr[data-job=\"{JOB}\"]').click()")
    browser.wait_for(
        f"location.hash.includes('{JOB}') && {READY} && document.querySelectorAll('#trajectories tbody tr').length"
    )
    assert browser.eval(ROWS) == ["traj_solved", "traj_partial", "traj_broken", "failure-9"]
    outcomes = browser.eval("[...document.querySelectorAll('#trajectories .badge')].map(b => b.textContent)")
    assert outcomes == ["completed", "truncated", "model_error", "failure"]
    assert browser.eval("document.querySelector('#list-summary').textContent") == "4 of 4 records"


@pytest.mark.parametrize(
    ("hash_", "expected"),
    [
        ("&outcome=completed", ["traj_solved"]),
        ("&env=math", ["traj_partial", "traj_broken"]),
        ("&rmin=0.1&rmax=0.5", ["traj_partial"]),  # records without a reward never match a reward range
        ("&rmin=0.3", ["traj_solved"]),
    ],
)
def test_viewer_filters_by_env_outcome_and_reward_range(browser, viewer_url, hash_, expected):
    open_view(browser, viewer_url, f"#job={JOB}{hash_}")
    assert browser.eval(ROWS) == expected


def test_viewer_filter_controls_update_the_list(browser, viewer_url):
    open_view(browser, viewer_url, f"#job={JOB}")
    browser.eval(
        "const s = document.querySelector('#f-outcome'); s.value = 'model_error';s.dispatchEvent(new Event('change'))"
    )
    browser.wait_for("location.hash.includes('outcome=model_error')")
    browser.wait_for(f"{READY} && document.querySelectorAll('#trajectories tbody tr').length === 1")
    assert browser.eval(ROWS) == ["traj_broken"]


def test_viewer_renders_one_trajectory_as_a_conversation(browser, viewer_url):
    open_view(browser, viewer_url, f"#job={JOB}")
    browser.eval("document.querySelector('tr[data-traj=\"traj_solved\"]').click()")
    browser.wait_for("!!document.querySelector('#detail-reward')")
    detail = browser.eval("document.querySelector('#detail-pane').innerText")
    assert browser.eval("document.querySelector('#detail-reward').textContent") == "1"
    for expected in (
        "traj_solved",
        "completed",
        "state",
        "0.75",
        "format",
        "0.25",  # reward components
        "Book room 4 at noon.",
        "book_room",
        '"room": 4',
        "booked room 4 at 12:00",
        "Done: room 4.",
        "rollgate-tiny",
        "v3",
        "wp-1",
        "workplace",
    ):
        assert expected in detail, expected
    turns = browser.eval(
        "[...document.querySelectorAll('table.turns tbody tr')].map(r => [...r.cells].map(c => c.textContent))"
    )
    assert turns == [["1", "31", "12", "-0.5", "stop", "w3"], ["2", "58", "5", "-0.5", "stop", "w3"]]
    timings = browser.eval("[...document.querySelectorAll('#detail-pane table.kv')].at(-1).innerText")
    assert "1.25" in timings and "0.75" in timings and "0.125" in timings
    kinds = browser.eval("[...document.querySelectorAll('.conversation .msg')].map(m => m.className)")
    assert kinds == ["msg user", "msg call", "msg output", "msg assistant"]
    shot = browser.screenshot("viewer-trajectory.png")
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
    browser.eval("document.querySelector('.conversation').scrollIntoView()")
    browser.screenshot("viewer-conversation.png")


def test_viewer_shows_the_error_record_of_failed_episodes_and_rows(browser, viewer_url):
    open_view(browser, viewer_url, f"#job={JOB}&traj=traj_broken")
    error = browser.eval("document.querySelector('#detail-error').innerText")
    assert "upstream" in error and "model" in error and "model server answered 502" in error
    assert browser.eval("document.querySelector('#detail-reward').textContent") == "—"
    open_view(browser, viewer_url, f"#job={JOB}&traj=failure-9")
    error = browser.eval("document.querySelector('#detail-error').innerText")
    assert "responses_create_params.input" in error and "bad_request" in error
    browser.screenshot("viewer-failure.png")


def test_viewer_shows_model_output_as_text_never_as_html(browser, viewer_url):
    open_view(browser, viewer_url, f"#job={JOB}&traj=traj_partial")
    assert browser.eval("document.querySelector('.conversation img')") is None
    assert HOSTILE in browser.eval("document.querySelector('.conversation').innerText")
    assert browser.eval("document.title") == "Rollgate trajectories"


def test_viewer_asks_for_the_token_and_sends_it_as_a_bearer(browser):
    with serve_in_thread(standin_gateway(api_key="s3cret")) as url:
        browser.goto("about:blank")
        browser.goto(f"{url}/ui#job={JOB}")
        browser.wait_for("!!document.body && document.body.dataset.state === 'error'")
        banner = browser.eval("document.querySelector('#banner').innerText")
        assert "401" in banner or "bearer token" in banner
        assert "API token" in banner
        browser.eval(
            "document.querySelector('#token').value = 's3cret';document.querySelector('#token-form').requestSubmit()"
        )
        browser.wait_for(READY)
        assert browser.eval(ROWS) == ["traj_solved", "traj_partial", "traj_broken", "failure-9"]
        assert browser.eval("sessionStorage.getItem('rollgate.token')") == "s3cret"
        assert json.loads(browser.eval("JSON.stringify(localStorage)")) == {}  # never persisted beyond the tab


COLUMNS = "[...document.querySelectorAll('#detail-pane .role-col')]"


def test_viewer_lists_each_roles_trajectory_of_a_multi_role_job(browser, viewer_url):
    open_view(browser, viewer_url, f"#job={ROLES_JOB}")
    assert browser.eval(ROWS) == [
        "traj_ep_won_player_0",
        "traj_ep_won_player_1",
        "traj_ep_failed_player_0",
        "traj_ep_failed_player_1",
    ]
    cells = browser.eval("[...document.querySelectorAll('#trajectories tbody tr')].map(r => r.cells[3].textContent)")
    assert cells == ["player_0", "player_1", "player_0", "player_1"]
    assert browser.eval("document.querySelector('#f-role-label').hidden") is False
    open_view(browser, viewer_url, f"#job={ROLES_JOB}&role=player_1&outcome=completed")
    assert browser.eval(ROWS) == ["traj_ep_won_player_1"]
    summary = browser.eval(
        "[...document.querySelectorAll('#role-summary tbody tr')].map(r => [...r.cells].map(c => c.textContent))"
    )
    assert summary == [
        ["player_0", "2", "1", "completed 1, model_error 1"],
        ["player_1", "2", "-1", "completed 1, model_error 1"],
    ]
    open_view(browser, viewer_url, f"#job={JOB}")  # a single-role job has no role filter and no role table
    assert browser.eval("document.querySelector('#f-role-label').hidden") is True
    assert browser.eval("document.querySelector('#role-summary')") is None


def test_viewer_shows_an_episodes_roles_side_by_side(browser, viewer_url):
    open_view(browser, viewer_url, f"#job={ROLES_JOB}")
    browser.eval("document.querySelector('tr[data-traj=\"traj_ep_won_player_1\"]').click()")
    browser.wait_for("!!document.querySelector('#detail-episode')")
    assert browser.eval("document.querySelector('#detail-episode').textContent") == "ep_won"
    roles = browser.eval(
        f"{COLUMNS}.map(c => [c.dataset.role, c.querySelector('.role-reward').textContent,"
        " c.querySelector('.badge').textContent, c.classList.contains('selected')])"
    )
    assert roles == [["player_0", "1", "completed", False], ["player_1", "-1", "completed", True]]
    # side by side: the columns share a row, player_0 left of player_1
    boxes = browser.eval(f"{COLUMNS}.map(c => {{ const b = c.getBoundingClientRect(); return [b.left, b.top]; }})")
    assert boxes[0][0] < boxes[1][0] and boxes[0][1] == boxes[1][1]
    texts = browser.eval(f"{COLUMNS}.map(c => c.innerText)")
    expected_texts = (("rollgate-tiny", "temperature 1", "X at 4"), ("opponent", "temperature 0.3", "O at 0"))
    for text, expected in zip(texts, expected_texts, strict=True):
        for part in expected:
            assert part in text, (part, text)
    turns = browser.eval(f"{COLUMNS}.map(c => c.querySelectorAll('table.turns tbody tr').length)")
    assert turns == [3, 2]  # each role's own model calls
    detail = browser.eval("document.querySelector('#detail-pane').innerText")
    assert "grp_ttt #0" in detail and "textarena/TicTacToe" in detail and "ttt-1" in detail
    browser.screenshot("viewer-episode.png")


def test_viewer_shows_a_failed_episodes_error_on_every_role_without_a_reward(browser, viewer_url):
    open_view(browser, viewer_url, f"#job={ROLES_JOB}&traj=traj_ep_failed_player_0")
    assert browser.eval("document.querySelector('#detail-episode').textContent") == "ep_failed"
    roles = browser.eval(
        f"{COLUMNS}.map(c => [c.querySelector('.role-reward').textContent, c.querySelector('.badge').textContent,"
        " c.querySelector('.role-error').innerText])"
    )
    assert [r[:2] for r in roles] == [["—", "model_error"], ["—", "model_error"]]
    assert all("role player_1: model server answered 502" in r[2] for r in roles)
    assert browser.eval(f"{COLUMNS}[1].innerText").count("no model turns recorded") == 1
