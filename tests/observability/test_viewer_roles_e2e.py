"""The viewer on a real embedded gateway running a real multi-role job: TicTacToe played by two
scripted policies on the tiny model's tokenizer (tests/gateway/test_roles_jobs.py checks the
records themselves). The viewer must read the `episode` lines of the real results stream and show
each episode's role trajectories side by side, as the stored records say."""

from __future__ import annotations

import json

import httpx
import pytest

from rollgate.core.schemas import EpisodeRecord
from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings

pytest.importorskip("textarena")

TTT = "textarena/TicTacToe"


def moves(*cells: int) -> dict[str, str]:
    turns = [{"call": {"name": "act", "arguments": {"action": f"[{c}]"}}} for c in cells] + [{"text": "gg"}]
    return {"rollgate_script": json.dumps(turns)}


def test_the_viewer_shows_a_real_roles_jobs_episodes_side_by_side(browser, tiny_model_dir):
    from rollgate.stack.embedded import build_app

    settings = Settings(model={"backend": "scripted", "model_path": tiny_model_dir}, envs=[TTT])
    roles = {
        "player_0": {"metadata": moves(0, 1, 2), "policy_version": "seat-a"},
        "player_1": {"metadata": moves(3, 4), "sampling": {"temperature": 0.5}},
    }
    rows = [{"responses_create_params": {"input": "Play TicTacToe."}, "env": TTT, "seed": 3, "task_id": "ttt-view"}]
    with serve_in_thread(build_app(settings), timeout_s=120) as url:
        with httpx.Client(base_url=url, timeout=120) as c:
            r = c.post("/v1/rollouts", json={"tasks": rows, "repeats": 2, "roles": roles})
            assert r.status_code == 201, r.text
            job_id = r.json()["job_id"]
            lines = c.get(f"/v1/rollouts/{job_id}/results", params={"wait": "true"}).text.splitlines()
        episodes = [EpisodeRecord.model_validate(m["record"]) for m in map(json.loads, lines) if m["type"] == "episode"]
        assert len(episodes) == 2
        browser.goto("about:blank")
        browser.goto(f"{url}/ui#job={job_id}")
        browser.wait_for("!!document.body && document.body.dataset.state === 'ready'")
        shown = browser.eval("[...document.querySelectorAll('#trajectories tbody tr')].map(r => r.dataset.traj)")
        assert sorted(shown) == sorted(t.trajectory_id for e in episodes for t in e.trajectories)
        episode = episodes[1]
        pick = episode.trajectories[0]
        browser.eval(f"document.querySelector('tr[data-traj=\"{pick.trajectory_id}\"]').click()")
        browser.wait_for("!!document.querySelector('#detail-episode')")
        assert browser.eval("document.querySelector('#detail-episode').textContent") == episode.episode_id
        columns = browser.eval(
            "[...document.querySelectorAll('#detail-pane .role-col')].map(c => [c.dataset.role, c.dataset.traj,"
            " c.querySelector('.role-reward').textContent, c.querySelectorAll('table.turns tbody tr').length,"
            " c.innerText])"
        )
        assert [col[:4] for col in columns] == [
            [t.role, t.trajectory_id, f"{t.reward:g}", len(t.turns)] for t in episode.trajectories
        ]
        assert [col[2] for col in columns] == ["1", "-1"]  # player_0's line wins
        assert "seat-a" in columns[0][4] and "temperature 0.5" in columns[1][4]
        browser.screenshot("viewer-real-episode.png")


def test_the_viewer_shows_an_eval_job_with_roles_as_each_roles_win_draw_and_loss(browser, tiny_model_dir):
    from rollgate.stack.embedded import build_app

    settings = Settings(model={"backend": "scripted", "model_path": tiny_model_dir}, envs=[TTT])
    roles = {"player_0": {"metadata": moves(0, 1, 2)}, "player_1": {"metadata": moves(3, 4)}}
    rows = [{"responses_create_params": {"input": "Play TicTacToe."}, "env": TTT, "seed": 3, "task_id": "ttt-eval"}]
    with serve_in_thread(build_app(settings), timeout_s=120) as url:
        with httpx.Client(base_url=url, timeout=120) as c:
            r = c.post("/v1/rollouts", json={"tasks": rows, "k": 2, "roles": roles, "purpose": "eval"})
            assert r.status_code == 201, r.text
            job_id = r.json()["job_id"]
            c.get(f"/v1/rollouts/{job_id}/results", params={"wait": "true"})
            report = c.get(f"/v1/rollouts/{job_id}/report").json()
        browser.goto("about:blank")
        browser.goto(f"{url}/ui#job={job_id}")
        browser.wait_for("!!document.querySelector('#report tr[data-role]')")
        shown = browser.eval(
            "[...document.querySelectorAll('#report tbody tr')].map(r => [...r.cells].map(c => c.textContent))"
        )
        assert [row[:3] for row in shown] == [
            ["role player_0", "2", "1 [1, 1]"],
            ["role player_1", "2", "0 [0, 0]"],
        ]
        assert shown[1][4] == "1 [1, 1]" and report["roles"]["player_1"]["loss"]["value"] == 1.0
        assert "2 of 2 games with a result" in browser.eval("document.querySelector('#report').textContent")
        browser.screenshot("viewer-eval-roles.png")
