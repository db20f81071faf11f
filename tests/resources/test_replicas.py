"""Replicas of one environment share sessions through Redis: two real `rollgate serve --role
resources` processes serve one session alternately without losing state, concurrent calls on both
replicas never lose an update, and one session's id never reaches another session."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.procs import ServerProcess, rollgate_cmd

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _row(env: str, index: int) -> dict:
    return json.loads((EXAMPLES / f"{env}.jsonl").read_text().splitlines()[index])


@pytest.fixture(scope="module")
def replicas(redis_url, tmp_path_factory):
    """Two workplace replicas and two game2048 replicas on one Redis, started in parallel."""
    logs = tmp_path_factory.mktemp("replicas")
    procs = {}
    for env in ("workplace", "game2048"):
        for name in ("a", "b"):
            port = free_port()
            procs[(env, name)] = ServerProcess(
                rollgate_cmd(
                    "serve", "--role", "resources", "--env", env, "--port", str(port), "--redis-url", redis_url
                ),
                port,
                log_path=logs / f"{env}-{name}.log",
            )
    try:
        with concurrent.futures.ThreadPoolExecutor(len(procs)) as pool:
            list(pool.map(lambda p: p.start(timeout_s=90), procs.values()))
        yield {k: p.url for k, p in procs.items()}
    finally:
        for p in procs.values():
            p.kill()


async def _call(c: httpx.AsyncClient, url: str, sid: str, tool: str, args: dict) -> dict:
    r = await c.post(f"{url}/sessions/{sid}/tools/{tool}", json={"arguments": args})
    assert r.status_code == 200, r.text
    return r.json()


async def test_one_session_served_alternately_by_two_replicas(replicas):
    a, b = replicas[("workplace", "a")], replicas[("workplace", "b")]
    row = _row("workplace", 0)  # email_contact: lookup_contact then send_email
    lookup, send = row["gold"]["calls"]
    async with httpx.AsyncClient(timeout=30) as c:
        sid = (await c.post(f"{a}/sessions", json=row)).json()["session_id"]  # seed on A
        try:
            found = await _call(c, b, sid, lookup["name"], lookup["arguments"])  # tool on B
            assert send["arguments"]["recipient"] in found["output"]
            sent = await _call(c, a, sid, send["name"], send["arguments"])  # tool on A
            assert not sent["is_error"]
            r = await c.post(f"{b}/sessions/{sid}/verify", json={"response": "Answer: done"})  # verify on B
            assert r.status_code == 200 and r.json()["reward"] == 1.0, r.text
            listed = await _call(c, b, sid, "search_emails", {"folder": "sent"})
            assert send["arguments"]["subject"] in listed["output"]
        finally:
            assert (await c.delete(f"{b}/sessions/{sid}")).status_code == 204
        r = await c.post(f"{a}/sessions/{sid}/verify", json={"response": "x"})
        assert r.status_code == 404  # deleted on B means gone on A


async def test_sessions_are_isolated_across_replicas(replicas):
    a, b = replicas[("workplace", "a")], replicas[("workplace", "b")]
    row = _row("workplace", 0)
    lookup, send = row["gold"]["calls"]
    async with httpx.AsyncClient(timeout=30) as c:
        s1 = (await c.post(f"{a}/sessions", json=row)).json()["session_id"]
        s2 = (await c.post(f"{b}/sessions", json=row)).json()["session_id"]
        try:
            assert s1 != s2 and len(s1) >= 24
            await _call(c, b, s1, send["name"], send["arguments"])  # act in session 1 only
            v1 = (await c.post(f"{a}/sessions/{s1}/verify", json={"response": "done"})).json()
            v2 = (await c.post(f"{a}/sessions/{s2}/verify", json={"response": "done"})).json()
            assert v1["reward"] == 1.0 and v2["reward"] == 0.0
            sent2 = await _call(c, a, s2, "search_emails", {"folder": "sent"})
            assert "no email matches" in sent2["output"]
            for guess in (s1[:-1] + ("A" if s1[-1] != "A" else "B"), s1 + s2, "../" + s1):
                r = await c.post(f"{b}/sessions/{guess}/tools/search_emails", json={"arguments": {}})
                assert r.status_code == 404, (guess, r.text)
        finally:
            for sid in (s1, s2):
                await c.delete(f"{a}/sessions/{sid}")


async def test_concurrent_moves_on_both_replicas_lose_no_update(replicas):
    a, b = replicas[("game2048", "a")], replicas[("game2048", "b")]
    row = _row("game2048", 3)
    async with httpx.AsyncClient(timeout=60) as c:
        sid = (await c.post(f"{a}/sessions", json=row)).json()["session_id"]
        try:
            calls = [
                _call(c, (a, b)[i % 2], sid, "move", {"direction": ("left", "down", "right", "down")[i % 4]})
                for i in range(16)
            ]
            outs = await asyncio.gather(*calls)
            ok = sum(not o["is_error"] for o in outs)
            view = await _call(c, b, sid, "view_board", {})
            assert int(re.search(r"moves: (\d+)/", view["output"]).group(1)) == ok
            assert ok >= 8
        finally:
            await c.delete(f"{a}/sessions/{sid}")


async def test_the_same_seeded_game_plays_identically_on_either_replica(replicas):
    a, b = replicas[("game2048", "a")], replicas[("game2048", "b")]
    row = _row("game2048", 0)
    moves = row["gold"]["calls"]
    async with httpx.AsyncClient(timeout=30) as c:
        s1 = (await c.post(f"{a}/sessions", json=row)).json()["session_id"]
        s2 = (await c.post(f"{b}/sessions", json=row)).json()["session_id"]
        try:
            out1 = [
                (await _call(c, (a, b)[i % 2], s1, m["name"], m["arguments"]))["output"] for i, m in enumerate(moves)
            ]
            out2 = [(await _call(c, b, s2, m["name"], m["arguments"]))["output"] for m in moves]
            assert out1 == out2
            r = await c.post(f"{a}/sessions/{s1}/verify", json={"response": "Answer: done"})
            assert r.json()["reward"] == 1.0
        finally:
            for sid in (s1, s2):
                await c.delete(f"{b}/sessions/{sid}")
