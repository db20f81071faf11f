"""Rollgate environments served over OpenEnv's wire protocol, driven by OpenEnv's own client
(`GenericEnvClient` over the stateful WebSocket /ws) on real servers on loopback: standalone,
in a multi-environment server, in the embedded app's lazy /envs routes and through the gateway;
rewards equal what the native verify gives; `openenv validate --url` passes; bad frames get
error frames naming the field; capacity; a closed socket deletes its session; the model reaches
only tools (docs/api.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys

import httpx
import jsonschema
import pytest
from fastapi import FastAPI

pytest.importorskip("openenv", reason='OpenEnv tests need the optional extra "interop" (pip install -e ".[interop]")')

from websockets.asyncio.client import connect  # noqa: E402

from rollgate.core.errors import NotFound  # noqa: E402
from rollgate.core.metrics import Metrics  # noqa: E402
from rollgate.core.replicas import ReplicaSet  # noqa: E402
from rollgate.core.session_store import MemorySessionStore  # noqa: E402
from rollgate.core.settings import Settings  # noqa: E402
from rollgate.gateway.proxy import Forwarder, proxy_router  # noqa: E402
from rollgate.gateway.server import create_gateway_app  # noqa: E402
from rollgate.jobs import make_queue  # noqa: E402
from rollgate.resources_servers.app import create_resources_app  # noqa: E402
from rollgate.resources_servers.base import EnvRuntime  # noqa: E402
from rollgate.resources_servers.envs import wordle  # noqa: E402
from rollgate.resources_servers.interop.openenv_serve import OpenEnvFace  # noqa: E402
from rollgate.resources_servers.lazy_routes import envs_router  # noqa: E402
from rollgate.resources_servers.registry import load_env  # noqa: E402
from rollgate.resources_servers.server import build_multi_app, make_runtime  # noqa: E402
from tests.gateway.serving import serve_here  # noqa: E402
from tests.resources.toy_env import CounterEnv  # noqa: E402

MATH_ROW = {
    "responses_create_params": {"input": [{"role": "user", "content": "What is 17 * 23?"}]},
    "task_id": "m-17x23",
    "expected_answer": "391",
}


@pytest.fixture(scope="module")
def Client():
    """OpenEnv's generic client; importing openenv.core takes seconds, paid once per module."""
    from openenv.core.generic_client import GenericEnvClient

    return GenericEnvClient


def runtime(name: str) -> EnvRuntime:
    return EnvRuntime(load_env(name), MemorySessionStore())


async def native_play(base: str, row: dict, calls: list[tuple[str, dict]], answer: str) -> tuple[list[str], dict]:
    """The same episode over the native routes: tool outputs and the verify answer."""
    async with httpx.AsyncClient(base_url=base, timeout=30) as c:
        sid = (await c.post("/sessions", json=row)).json()["session_id"]
        outs = [(await c.post(f"/sessions/{sid}/tools/{n}", json={"arguments": a})).json()["output"] for n, a in calls]
        verdict = (await c.post(f"/sessions/{sid}/verify", json={"response": answer})).json()
        await c.delete(f"/sessions/{sid}")
    return outs, verdict


async def openenv_play(Client, url: str, row: dict, calls: list[tuple[str, dict]], answer: str, **kw):
    async with Client(base_url=url, **kw) as env:
        first = await env.reset(task=row)
        assert not first.done and first.reward is None
        outs = []
        for name, args in calls:
            r = await env.step({"tool": name, "arguments": args})
            assert (r.done, r.reward, r.observation["tool"], r.observation["is_error"]) == (False, None, name, False)
            outs.append(r.observation["output"])
        state = await env.state()
        last = await env.step({"answer": answer})
        after = await env.state()
    return first, outs, state, last, after


async def gone(rt: EnvRuntime, sid: str) -> bool:
    """Whether the session is deleted (the server handles a disconnect after the client returns)."""
    for _ in range(1000):
        try:
            await rt.store.get(sid)
        except NotFound:
            return True
        await asyncio.sleep(0.01)
    return False


async def test_openenv_client_plays_math_rewards_equal_native_verify(Client):
    rt = runtime("math")
    calls = [("calculator", {"expression": "17 * 23"})]
    async with serve_here(create_resources_app(rt)) as base:
        for answer in ("Answer: 391", "Answer: 390"):
            first, outs, state, last, after = await openenv_play(Client, f"{base}/openenv", MATH_ROW, calls, answer)
            native_outs, verdict = await native_play(base, MATH_ROW, calls, answer)
            assert outs == native_outs == ["391"]
            assert (last.done, last.reward) == (True, verdict["reward"])
            assert last.metadata["reward_components"] == verdict["reward_components"]
            assert last.metadata["metrics"] == verdict["metrics"]
            assert first.observation["prompt"] == MATH_ROW["responses_create_params"]["input"]
            assert [t["name"] for t in first.observation["tools"]] == ["calculator"]
            assert first.metadata == {"env": "math", "task_id": "m-17x23"}
            assert "expected_answer" not in json.dumps(first.observation)  # the row's secret stays on the server
            assert (state["step_count"], after["step_count"], after["done"]) == (1, 2, True)
            assert state["episode_id"] == after["episode_id"] and after["reward"] == verdict["reward"]
            assert await gone(rt, state["episode_id"])  # verified: the session is deleted
        assert verdict["reward"] == 0.0 and last.reward == 0.0  # the last round answered 390


async def test_openenv_client_plays_wordle_in_a_multi_env_server_and_the_embedded_routes(Client):
    row = wordle.example_tasks(1, seed=3)[0]
    calls = [(c["name"], c["arguments"]) for c in row["gold"]["calls"]]
    answer = row["gold"]["response"]
    multi = build_multi_app(Settings(), ["math", "wordle"], title="test")
    embedded = FastAPI()
    embedded.include_router(envs_router({"wordle": runtime("wordle")}))
    async with serve_here(multi) as base, serve_here(embedded) as emb:
        native_outs, verdict = await native_play(f"{base}/envs/wordle", row, calls, answer)
        assert verdict["reward"] > 0.5  # the gold path wins
        for url in (f"{base}/envs/wordle/openenv", f"{emb}/envs/wordle/openenv"):
            first, outs, state, last, _ = await openenv_play(Client, url, row, calls, answer)
            assert outs == native_outs and outs[-1].endswith("!")  # "solved in n guesses!"
            assert (last.done, last.reward, last.metadata["reward_components"]) == (
                True,
                verdict["reward"],
                verdict["reward_components"],
            )


async def test_reset_without_a_task_plays_a_generated_one_reproducible_by_seed(Client):
    async with serve_here(create_resources_app(runtime("game2048"))) as base:
        async with Client(base_url=f"{base}/openenv") as env:
            a = await env.reset(seed=11)
            b = await env.reset(seed=11)
            c = await env.reset(seed=12)
            moved = await env.step({"tool": "view_board", "arguments": {}})
        assert a.observation == b.observation and a.metadata == b.metadata
        assert a.metadata["task_id"] != c.metadata["task_id"]
        assert "Reach the" in a.observation["output"] and "moves" in moved.observation["output"]
    # an environment that generates no tasks needs one: the error names the field
    counter = create_resources_app(EnvRuntime(CounterEnv(), MemorySessionStore()))
    async with serve_here(counter) as base, Client(base_url=f"{base}/openenv") as env:
        with pytest.raises(RuntimeError, match=r"task row as `task`.*VALIDATION_ERROR"):
            await env.reset()
        with pytest.raises(RuntimeError, match=r"task\.responses_create_params.*VALIDATION_ERROR"):
            await env.reset(task={"target": 3})
        with pytest.raises(RuntimeError, match=r"seed.*VALIDATION_ERROR"):
            await env.reset(seed=-1, task={"responses_create_params": {"input": "go"}})
        with pytest.raises(RuntimeError, match=r"bogus.*VALIDATION_ERROR"):
            await env.reset(bogus=1)


async def test_reset_without_a_task_draws_from_the_family_generator_the_runtime_was_built_with(Client, tmp_path):
    pytest.importorskip("reasoning_gym", reason="the reasoning_gym family needs its library")
    # a family's generator lives on its registry entry, not in its class's module: make_runtime
    # hands it to the runtime, so nothing looks it up in a process-wide registry
    rt = make_runtime(Settings(home=str(tmp_path)), "reasoning_gym/chain_sum")
    assert rt.tasks is not None
    async with serve_here(create_resources_app(rt)) as base, Client(base_url=f"{base}/openenv") as env:
        a = await env.reset(seed=5)
        b = await env.reset(seed=5)
        c = await env.reset(seed=6)
    assert a.observation == b.observation and a.metadata["task_id"] == b.metadata["task_id"]
    assert a.metadata["task_id"] != c.metadata["task_id"]


async def test_bad_actions_and_frames_get_error_frames_naming_the_field(Client):
    async with serve_here(create_resources_app(runtime("math"))) as base:
        url = f"{base}/openenv"
        async with Client(base_url=url) as env:
            with pytest.raises(RuntimeError, match=r"send reset first.*EXECUTION_ERROR"):
                await env.step({"tool": "calculator", "arguments": {"expression": "1"}})
            await env.reset(task=MATH_ROW)
            bad = {
                r"action\.bogus": {"tool": "calculator", "bogus": 1},
                r"action: an action is": {"arguments": {}},
                r"action\.arguments": {"answer": "1", "arguments": {}},
                r"action\.answer": {"answer": 5},
            }
            for field, action in bad.items():
                with pytest.raises(RuntimeError, match=field + r".*VALIDATION_ERROR"):
                    await env.step(action)
            # a bad argument is the tool's error output, as on the native route: the model reads it
            r = await env.step({"tool": "calculator", "arguments": {"expr": "1"}})
            assert r.observation["is_error"] and "expression" in r.observation["output"] and not r.done
            assert (await env.state())["step_count"] == 1  # refused frames are not steps
            await env.step({"answer": "391"})
            with pytest.raises(RuntimeError, match=r"episode is over.*EXECUTION_ERROR"):
                await env.step({"answer": "391"})
        async with connect(url.replace("http", "ws") + "/ws") as ws:
            for frame, code, field in [
                ("{not json", "INVALID_JSON", None),
                ("[1]", "VALIDATION_ERROR", None),
                (json.dumps({"type": "dance"}), "UNKNOWN_TYPE", "type"),
                (json.dumps({"type": "step"}), "VALIDATION_ERROR", "data"),
                (json.dumps({"type": "reset", "data": {"seed": "x"}}), "VALIDATION_ERROR", "seed"),
                # nested past the limit every HTTP body has (rollgate.core.jsonutil.MAX_DEPTH)
                (
                    '{"type": "step", "data": {"action": ' + "[" * 300 + "]" * 300 + "}}",
                    "VALIDATION_ERROR",
                    "data.action[0][0]",
                ),
            ]:
                await ws.send(frame)
                answer = json.loads(await ws.recv())
                assert (answer["type"], answer["data"]["code"], answer["data"].get("field")) == ("error", code, field)
    async with serve_here(create_resources_app(runtime("math"))) as base, httpx.AsyncClient(base_url=base) as c:
        r = await c.post("/openenv/step", json={"action": {"tool": "calculator", "oops": 1}})
        assert r.status_code == 422 and r.json()["error"]["field"] == "action.oops"
        # the HTTP routes (bodies FastAPI parses) have the same nesting limit, naming the field
        deep = "[" * 300 + "]" * 300
        for path, body in [
            ("/openenv/step", '{"action": ' + deep + "}"),
            ("/openenv/reset", '{"seed": 1, "x": ' + deep + "}"),
        ]:
            r = await c.post(path, content=body, headers={"content-type": "application/json"})
            assert r.status_code == 400 and r.json()["error"]["field"].endswith("[0][0]"), (path, r.text)
            assert "nested deeper than 64 levels" in r.json()["error"]["message"]


LIFECYCLE_NAMES = ["seed", "verify", "close", "state", "delete", "sessions", "_call_tool", "__init__", "../verify"]


async def test_only_tools_are_reachable_never_lifecycle_operations(Client):
    """The invariant (docs/api.md): whatever tool name a client invents, step runs tools only."""
    rt = EnvRuntime(CounterEnv(), MemorySessionStore())
    row = {"responses_create_params": {"input": "go"}, "target": 3}
    async with serve_here(create_resources_app(rt)) as base:
        async with Client(base_url=f"{base}/openenv") as env:
            await env.reset(task=row)
            sid = (await env.state())["episode_id"]
            await env.step({"tool": "add", "arguments": {"amount": 3}})
            for name in LIFECYCLE_NAMES:
                with pytest.raises(RuntimeError, match=rf"unknown tool {name!r}.*VALIDATION_ERROR"):
                    await env.step({"tool": name, "arguments": {}})
            # the environment's own tool named `reset` is a tool: it resets the counter, not the session
            r = await env.step({"tool": "reset", "arguments": {"mode": "zero"}})
            assert r.observation["output"] == '{"value":0}'
            assert (await env.state())["episode_id"] == sid and (await rt.state(sid))["value"] == 0
            await env.step({"tool": "add", "arguments": {"amount": 3}})
            assert (await env.step({"answer": "3"})).reward == 1.5
        async with httpx.AsyncClient(base_url=f"{base}/openenv") as c:
            tools = (await c.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).json()
            assert [t["name"] for t in tools["result"]["tools"]] == ["add", "reset", "slow_read"]
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "add"}}
            assert "runs in an episode" in (await c.post("/mcp", json=call)).json()["error"]["message"]
            r = await c.post("/step", json={"action": {"tool": "verify"}, "task": row})
            assert r.status_code == 422 and r.json()["error"]["field"] == "action.tool"


async def test_capacity_reached_and_a_closed_socket_deletes_its_session(Client):
    rt = runtime("math")
    face = OpenEnvFace(rt, max_sessions=1)
    app = FastAPI()
    app.mount("/openenv", face)
    async with serve_here(app) as base:
        url = f"{base}/openenv"
        async with Client(base_url=url) as first:
            await first.reset(task=MATH_ROW)
            async with Client(base_url=url) as second:
                with pytest.raises(RuntimeError, match="CAPACITY_REACHED"):
                    await second.reset(task=MATH_ROW)
            sid = (await first.state())["episode_id"]
        assert await gone(rt, sid)  # the client's close frame ended the episode
        # a socket dropped mid-episode, with no close frame at all, deletes its session too
        async with connect(url.replace("http", "ws") + "/ws") as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"task": MATH_ROW}}))
            await ws.recv()
            await ws.send(json.dumps({"type": "state"}))
            sid = json.loads(await ws.recv())["data"]["episode_id"]
            ws.transport.abort()
        assert await gone(rt, sid)
        for _ in range(1000):  # the slot is free again once the server saw the disconnect
            if face.active == 0:
                break
            await asyncio.sleep(0.01)
        async with Client(base_url=url) as third:
            assert (await third.reset(task=MATH_ROW)).done is False


async def test_openenv_validate_passes_and_http_routes_are_stateless(Client):
    from openenv.cli._validation import validate_running_environment  # what `openenv validate --url` runs

    rt = runtime("math")
    async with serve_here(create_resources_app(rt)) as base, httpx.AsyncClient(base_url=f"{base}/openenv") as c:
        report = await asyncio.to_thread(validate_running_environment, f"{base}/openenv")
        assert report["passed"], [x for x in report["criteria"] if not x["passed"]]
        assert report["mode"] == "simulation"
        schema = (await c.get("/schema")).json()
        action = schema["action"]
        assert action["properties"]["tool"]["enum"] == ["calculator"]
        jsonschema.validate({"tool": "calculator", "arguments": {"expression": "1+1"}}, action)
        jsonschema.validate({"answer": "2"}, action)
        bad_args = {"tool": "calculator", "arguments": {"expr": 1}}
        for bad in (bad_args, {"tool": "seed"}, {}, {"answer": "2", "tool": "x"}, {"answer": "2", "arguments": {}}):
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(bad, action)
        # each branch carries its own properties, as OpenEnv's clients build actions from a branch
        branches = {b["title"]: b for b in action["oneOf"]}
        assert set(branches) == {"call calculator", "answer"}
        assert all(b["type"] == "object" and b["properties"] for b in branches.values())
        call = branches["call calculator"]
        assert call["properties"]["tool"]["const"] == "calculator" and call["required"] == ["tool"]
        assert call["properties"]["arguments"] == rt.tools()[0]["parameters"]
        assert "expression" in call["properties"]["arguments"]["properties"]
        assert set(branches["answer"]["properties"]) == {"answer", "metadata"}
        # stateless, as OpenEnv's own server: each call runs on a fresh session, deleted before the answer
        r = (await c.post("/reset", json={"task": MATH_ROW})).json()
        assert r["observation"]["prompt"] == MATH_ROW["responses_create_params"]["input"]
        r = (await c.post("/step", json={"action": {"answer": "391"}, "task": MATH_ROW})).json()
        assert (r["done"], r["reward"]) == (True, 1.0)
        assert (await c.get("/state")).json()["episode_id"] is None
        assert len(rt.store._data) == 0  # noqa: SLF001 - nothing left behind


@contextlib.asynccontextmanager
async def gateway(routers, api_key=None):
    settings = Settings()
    app = create_gateway_app(
        settings, make_queue(settings), known_envs=lambda: ["math"], routers=routers, metrics=Metrics(), api_key=api_key
    )
    async with serve_here(app) as front:
        yield front


async def test_through_the_gateway_and_the_embedded_app_with_auth(Client):
    calls = [("calculator", {"expression": "17 * 23"})]
    auth = {"Authorization": "Bearer k"}
    async with serve_here(create_resources_app(runtime("math"))) as replica:
        forwarder = Forwarder(api_key="k")
        proxy = proxy_router(forwarder, model=None, envs={"math": ReplicaSet([replica], what="env math")})
        async with gateway([proxy], api_key="k") as front:
            url = f"{front}/envs/math/openenv"
            *_, last, _ = await openenv_play(Client, url, MATH_ROW, calls, "Answer: 391", headers=auth)
            assert last.reward == 1.0
            async with httpx.AsyncClient(base_url=url, headers=auth) as c:
                assert (await c.get("/health")).json() == {"status": "healthy"}
            with pytest.raises(ConnectionError, match="403"):
                async with Client(base_url=url) as env:  # no token: the handshake is refused
                    await env.reset()
            with pytest.raises(ConnectionError, match="403"):
                async with Client(base_url=f"{front}/envs/nope/openenv", headers=auth) as env:
                    await env.reset()
        await forwarder.aclose()
    async with gateway([envs_router({"math": runtime("math")})], api_key="k") as front:
        *_, last, _ = await openenv_play(Client, f"{front}/envs/math/openenv", MATH_ROW, calls, "391", headers=auth)
        assert last.reward == 1.0
        with pytest.raises(ConnectionError, match="403"):
            async with Client(base_url=f"{front}/envs/math/openenv") as env:
                await env.reset()


def test_openenv_is_not_imported_on_the_start_up_path():
    code = (
        "import sys; import rollgate.resources_servers.app, rollgate.resources_servers.lazy_routes, "
        "rollgate.gateway.proxy; assert 'openenv' not in sys.modules, 'openenv imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
async def test_openenv_validate_cli_against_a_served_environment():
    async with serve_here(create_resources_app(runtime("wordle"))) as base:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "openenv.cli", "validate", "--url", f"{base}/openenv", "--json",
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode()
    assert json.loads(out)["passed"]
