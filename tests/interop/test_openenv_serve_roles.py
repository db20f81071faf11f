"""A multi-role environment on the OpenEnv face is refused with its reason (docs/interop.md):
OpenEnv's episode is one agent's, so OpenEnv's own client gets an error naming the roles and where
to play them instead, over the WebSocket and the HTTP routes, and no session is seeded. Driven by
OpenEnv's `GenericEnvClient` on a real server on loopback."""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("openenv", reason='OpenEnv tests need the optional extra "interop" (pip install -e ".[interop]")')

from rollgate.core.session_store import MemorySessionStore  # noqa: E402
from rollgate.resources_servers.app import create_resources_app  # noqa: E402
from rollgate.resources_servers.base import EnvRuntime  # noqa: E402
from rollgate.resources_servers.envs.solve_grade import SolveGradeEnv  # noqa: E402
from tests.gateway.serving import serve_here  # noqa: E402

ROW = {"responses_create_params": {"input": "solve and grade"}, "question": "2 + 3?", "answer": 5}
WHY = r"solve_grade has roles \(solver, grader\) and OpenEnv serves single-agent episodes"


async def test_openenv_clients_are_told_why_a_multi_role_environment_is_not_served():
    from openenv.core.generic_client import GenericEnvClient

    store = MemorySessionStore()
    async with serve_here(create_resources_app(EnvRuntime(SolveGradeEnv(), store))) as base:
        async with GenericEnvClient(base_url=f"{base}/openenv") as env:
            with pytest.raises(RuntimeError, match=WHY + r".*mcp\?role=.*VALIDATION_ERROR"):
                await env.reset(task=ROW)
            with pytest.raises(RuntimeError, match=WHY):
                await env.step({"tool": "submit", "arguments": {"answer": "5"}})
        async with httpx.AsyncClient(base_url=f"{base}/openenv") as c:
            for path, body in [("/reset", {"task": ROW}), ("/step", {"action": {"answer": "5"}, "task": ROW})]:
                r = await c.post(path, json=body)
                assert r.status_code == 400, r.text
                err = r.json()["error"]
                assert err["field"] == "env" and "rollout job with `roles`" in err["message"]
            meta = (await c.get("/metadata")).json()
            assert meta["name"] == "solve_grade" and meta["roles"] == ["solver", "grader"]
        assert await store.count() == 0  # nothing was seeded
