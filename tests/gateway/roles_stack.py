"""What the tests of jobs with roles share (test_roles_jobs.py, test_roles_eval_jobs.py): a second
model server on loopback as the other policy, an embedded gateway on loopback whose job queue is in
memory or on the real Redis, scripted TicTacToe moves and rows, and a job's results stream."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings
from rollgate.model_server.app import create_model_app
from rollgate.model_server.server import build_service
from tests.conftest import free_port

TTT = "textarena/TicTacToe"


def moves(*cells: int) -> dict[str, str]:
    turns = [{"call": {"name": "act", "arguments": {"action": f"[{c}]"}}} for c in cells] + [{"text": "gg"}]
    return {"rollgate_script": json.dumps(turns)}


def ttt_rows(n: int) -> list[dict]:
    return [
        {"responses_create_params": {"input": "Play TicTacToe."}, "env": TTT, "seed": 10 + i, "task_id": f"ttt-{i}"}
        for i in range(n)
    ]


def results(c: httpx.Client, job_id: str) -> list[dict]:
    r = c.get(f"/v1/rollouts/{job_id}/results", params={"wait": "true"}, timeout=120)
    assert r.status_code == 200, r.text
    return [json.loads(line) for line in r.text.splitlines() if line.strip()]


@contextlib.contextmanager
def other_policy_server(tiny_model_dir: str, **model: Any) -> Iterator[str]:
    """A scripted model server with the tiny model's tokenizer, serving the name `other-policy`."""
    settings = Settings(
        model={"backend": "scripted", "model_path": tiny_model_dir, "served_name": "other-policy", **model}
    )
    with serve_in_thread(create_model_app(build_service(settings)), timeout_s=60) as url:
        yield url


@contextlib.contextmanager
def roles_gateway(request: pytest.FixtureRequest, other_model_url: str, envs: list[str], **model: Any) -> Iterator[str]:
    """An embedded gateway with a scripted model, its queue in memory or on the real Redis (the
    fixture's param), `other-policy` and `down` as role models; its queue is cleared afterwards."""
    from rollgate.stack.embedded import build_app

    extra = {"redis_url": request.getfixturevalue("redis_url")} if request.param == "redis" else {}
    settings = Settings(
        model={"backend": "scripted", **model},
        envs=envs,
        gateway={"ui": False, "auth": False, "queue_prefix": f"rgtest:{uuid.uuid4().hex[:12]}"},
        # "down": a model server that is not running (nothing listens on that port)
        role_models={"other-policy": other_model_url, "down": f"http://127.0.0.1:{free_port()}"},
        **extra,
    )
    app = build_app(settings)
    with serve_in_thread(app, timeout_s=120) as url:
        yield url
    queue = app.state.worker.queue
    if hasattr(queue, "clear"):
        import asyncio

        asyncio.run(queue.clear())
